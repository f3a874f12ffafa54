//! The published test vectors (docs/test_vectors.json, written by scripts/test_vectors.py from the
//! layouts' formulas, independently of this code) against the core: each preset is the layout the
//! file gives, and every vector composes to its ID and decomposes back, at the field limits too.

use idgen_core::layout::{FieldOrder, IdParts, Layout, Preset};
use serde_json::Value;

fn document() -> Value {
    serde_json::from_str(include_str!("../../docs/test_vectors.json")).expect("docs/test_vectors.json is JSON")
}

fn int(value: &Value, key: &str) -> i64 {
    value[key].as_i64().unwrap_or_else(|| panic!("{key} is no integer in {value}"))
}

/// The layout an entry gives, built (and checked) by `Layout::new`.
fn layout_of(entry: &Value) -> Layout {
    let l = &entry["layout"];
    let bits = |key: &str| u32::try_from(int(l, key)).unwrap();
    let order = FieldOrder::from_label(l["field_order"].as_str().unwrap()).expect("a known field order");
    Layout::new(
        int(l, "epoch_unix_ms"),
        int(l, "time_unit_ms"),
        bits("time_bits"),
        bits("machine_bits"),
        bits("sequence_bits"),
        order,
    )
    .unwrap_or_else(|e| panic!("{}: {e}", entry["name"]))
}

fn entries() -> Vec<Value> {
    let doc = document();
    assert_eq!(doc["format"].as_i64(), Some(2));
    doc["layouts"].as_array().expect("layouts").clone()
}

#[test]
fn every_preset_and_a_custom_layout_have_vectors() {
    let names: Vec<String> = entries().iter().map(|e| e["preset"].as_str().unwrap().to_owned()).collect();
    for preset in Preset::ALL {
        assert_eq!(names.iter().filter(|n| *n == preset.name()).count(), 1, "{}", preset.name());
    }
    assert!(names.iter().any(|n| n == Preset::CUSTOM), "no custom layout");
}

#[test]
fn each_preset_is_the_layout_the_vectors_give() {
    for entry in entries() {
        let layout = layout_of(&entry);
        let preset = entry["preset"].as_str().unwrap();
        match Preset::from_name(preset) {
            Some(p) => assert_eq!(p.layout(), layout, "{preset}"),
            None => assert_eq!((preset, Preset::of(&layout)), (Preset::CUSTOM, None)),
        }
        assert_eq!(
            entry["layout"]["epoch"].as_str().unwrap(),
            idgen_core::format::iso_utc(layout.epoch_unix_ms),
            "{preset}"
        );
    }
}

#[test]
fn each_layouts_limits_are_the_ones_published() {
    for entry in entries() {
        let layout = layout_of(&entry);
        let name = entry["name"].as_str().unwrap();
        assert_eq!(int(&entry, "machine_ids"), i64::from(layout.max_machine_id()) + 1, "{name}");
        assert_eq!(int(&entry, "ids_per_second") as u64, layout.ids_per_second(), "{name}");
        assert_eq!(int(&entry, "last_unix_ms"), layout.last_unix_ms(), "{name}");
        assert_eq!(int(&entry, "max_id"), layout.max_id(), "{name}");
        assert_eq!(entry["max_id_text"].as_str().unwrap(), layout.max_id().to_string(), "{name}");
    }
    let js_safe = entries().into_iter().find(|e| e["preset"] == "js_safe").unwrap();
    assert_eq!(int(&js_safe, "max_id"), (1 << 53) - 1);
}

#[test]
fn every_vector_composes_to_its_id_and_decomposes_back() {
    for entry in entries() {
        let layout = layout_of(&entry);
        let name = entry["name"].as_str().unwrap();
        for v in entry["vectors"].as_array().unwrap() {
            let ticks = layout.ticks_at(int(v, "unix_ms")).unwrap_or_else(|e| panic!("{name} {v}: {e}"));
            let parts = IdParts {
                ticks,
                machine_id: u16::try_from(int(v, "machine_id")).unwrap(),
                sequence: u32::try_from(int(v, "sequence")).unwrap(),
            };
            let id = int(v, "id");
            assert_eq!(ticks, int(v, "ticks"), "{name} {v}");
            assert_eq!(layout.unix_ms_of(ticks), int(v, "tick_unix_ms"), "{name} {v}");
            assert_eq!(idgen_core::format::iso_utc(layout.unix_ms_of(ticks)), v["tick_iso"].as_str().unwrap());
            assert_eq!(idgen_core::format::iso_utc(int(v, "unix_ms")), v["iso"].as_str().unwrap());
            assert_eq!(layout.compose(parts), Ok(id), "{name} {v}");
            assert_eq!(layout.pack(parts), id, "{name} {v}");
            assert_eq!(layout.decompose(id), Ok(parts), "{name} {v}");
            assert_eq!(v["id_text"].as_str().unwrap(), id.to_string(), "{name} {v}");
        }
    }
}

#[test]
fn the_invalid_times_are_refused() {
    for entry in entries() {
        let layout = layout_of(&entry);
        for v in entry["invalid"].as_array().unwrap() {
            assert!(layout.ticks_at(int(v, "unix_ms")).is_err(), "{} {v}", entry["name"]);
            assert_eq!(idgen_core::format::iso_utc(int(v, "unix_ms")), v["iso"].as_str().unwrap());
        }
    }
}
