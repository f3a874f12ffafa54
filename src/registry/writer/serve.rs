//! What a registry writer does with a request: each kind its own handler, each write in a
//! transaction of its own (`transaction`), as the extension owner, durable.

use super::transaction::in_own_transaction;
use super::{Answer, LeaseAnswer, LeaseRequest, Renewal, Request};
use crate::clock::unix_ms;
use crate::diagnostics::alerts::{self, Notice};
use crate::durability;
use crate::errors::CarriedError;
use crate::history::{self, Who};
use crate::privilege::as_extension_owner;
use crate::registry::claim::{self, Refused};
use crate::registry::layouts;
use crate::registry::store::{self, BackendCheck};
use crate::settings::ClaimSettings;
use idgen_core::claim::ClaimTerms;
use idgen_core::history::Event;
use idgen_core::input::NodeIdentity;
use idgen_core::layout::Pool;
use idgen_core::lease::Terms;
use idgen_core::watermark::HolderKind;
use idgen_core::{messages, IdgenError};
use pgrx::spi::{Spi, SpiClient};

pub(super) fn serve(request: Request) -> Answer {
    match request {
        Request::BackendLease(LeaseRequest { function, node, renew, settings, who }) => {
            serve_backend_lease(&function, &node, renew, &settings, &who)
        }
        Request::PrepareService { service } => committed(|client| layouts::prepare(client, &service)),
        Request::RecordRefusal { event } => committed(|client| history::write_refusal(client, &event)),
    }
}

/// Runs `write` in a durable transaction of its own, as the extension owner; answers with nothing
/// or the error it raised.
fn committed(write: impl FnOnce(&mut SpiClient)) -> Answer {
    let done = in_own_transaction(|| {
        as_extension_owner(|| {
            Spi::connect_mut(|client| {
                durability::make_commit_durable();
                write(client)
            })
        });
        ((), true)
    });
    Answer::alone(done.map(|()| None))
}

/// What a lease request did in its first transaction, and what to record after it.
struct LeaseStep {
    result: Result<LeaseAnswer, IdgenError>,
    notices: Vec<Notice>,
    /// Events to record whatever became of the first transaction, and whether each is a
    /// refusal (rate-limited).
    record_after: Vec<(Event, bool)>,
}

fn serve_backend_lease(
    function: &str,
    node: &NodeIdentity,
    renew: Option<Renewal>,
    settings: &ClaimSettings,
    who: &Who,
) -> Answer {
    let first = in_own_transaction(|| {
        let step = as_extension_owner(|| {
            Spi::connect_mut(|client| {
                durability::make_commit_durable();
                lease_step(client, function, node, renew.as_ref(), settings, who)
            })
        });
        // A refused claim's writes (a set-aside) are undone; what it refused is recorded after.
        let commit = step.result.is_ok();
        if commit {
            announce(&step.notices);
        }
        (step, commit)
    });
    let step = match first {
        Ok(step) => step,
        Err(carried) => return Answer::alone(Err(carried)),
    };
    if !step.record_after.is_empty() {
        let recorded = in_own_transaction(|| {
            as_extension_owner(|| {
                Spi::connect_mut(|client| {
                    durability::make_commit_durable();
                    for (event, refusal) in &step.record_after {
                        if *refusal {
                            history::record_refusal_if_due(client, event);
                        } else {
                            history::record(client, event);
                        }
                    }
                })
            });
            ((), true)
        });
        if let Err(e) = recorded {
            pgrx::log!("idgen: history events not recorded ({}): {:?}", e.message, step.record_after.len());
        }
    }
    if step.result.is_err() {
        // Alerts of a refused claim: the log has them (a NOTIFY would need a commit).
        for notice in &step.notices {
            if let Notice::Alert(alert) = notice {
                alerts::announce(alert, false);
            }
        }
    }
    let (mut warnings, mut alert_warnings) = (Vec::new(), Vec::new());
    for notice in &step.notices {
        match notice {
            Notice::Warning(w) => warnings.push(w.clone()),
            Notice::Alert(alert) => alert_warnings.push(alerts::warning_of(alert)),
        }
    }
    Answer { result: step.result.map(Some).map_err(CarriedError::from), warnings, alert_warnings }
}

fn announce(notices: &[Notice]) {
    for notice in notices {
        if let Notice::Alert(alert) = notice {
            alerts::announce(alert, true);
        }
    }
}

fn lease_step(
    client: &mut SpiClient,
    function: &str,
    node: &NodeIdentity,
    renew: Option<&Renewal>,
    settings: &ClaimSettings,
    who: &Who,
) -> LeaseStep {
    let mut notices = Vec::new();
    let mut record_after = Vec::new();
    if let Some(renewal) = renew {
        // A renewal touches its own row only: the range does not matter.
        let pool = Pool { first: 0, last: u16::MAX };
        let times = ClaimTerms::of(HolderKind::Backend, settings, renewal.window_ms, pool);
        match store::renew_backend_lease(client, &renewal.held, &times, renewal.epoch, renewal.window_ms) {
            BackendCheck::Confirmed { verified_at, lease_until, issued_until } => {
                let answer = LeaseAnswer::Renewed {
                    verified_at_unix_ms: unix_ms(verified_at),
                    lease_until_unix_ms: unix_ms(lease_until),
                    issued_until_unix_ms: unix_ms(issued_until),
                };
                return LeaseStep { result: Ok(answer), notices, record_after };
            }
            BackendCheck::Busy => {
                let held = &renewal.held;
                let busy = messages::identity_busy(function, &held.node, Some(held.machine_id));
                return LeaseStep { result: Err(busy), notices, record_after };
            }
            BackendCheck::Lost(now) => {
                // A registry created again, or truncated, is not a loss to another holder: say so,
                // and count no ownership loss (the metrics' alarm).
                let now_epoch = store::read_epoch(client);
                if now_epoch != renewal.epoch {
                    let warning =
                        messages::backend_lease_of_old_registry(function, &renewal.held, renewal.epoch, now_epoch);
                    notices.push(Notice::Warning(warning));
                } else {
                    let warning = messages::backend_lease_lost(function, &renewal.held, now.as_ref());
                    record_after.push((history::lost_event(&renewal.held, &warning, who), false));
                    notices.push(Notice::Warning(warning));
                }
            }
        }
    }
    // This transaction commits on its own: a service may be readied for claims in it.
    let recorded = layouts::ready(client, &node.service).unwrap_or_else(|| {
        layouts::prepare(client, &node.service);
        layouts::ready(client, &node.service).expect("a service readied in this transaction is ready")
    });
    match claim::claim(client, function, node, settings, who, &recorded, None) {
        Ok(granted) => {
            notices.extend(granted.notices);
            let c = granted.claim;
            let terms = Terms {
                layout: c.layout,
                machine_id: u16::try_from(c.machine_id).expect("machine ids fit 16 bits"),
                version: c.version,
                registry_epoch: c.registry_epoch,
                claimed_at_unix_ms: unix_ms(c.claimed_at),
                not_before_unix_ms: c.not_before_unix_ms,
                lease_until_unix_ms: unix_ms(c.lease_until),
                issued_until_unix_ms: unix_ms(c.issued_until),
            };
            // The lost event recorded with the claim, in its transaction.
            for (event, _) in record_after.drain(..) {
                history::tally(&event);
                history::record(client, &event);
            }
            LeaseStep { result: Ok(LeaseAnswer::Claimed(terms)), notices, record_after }
        }
        Err(Refused { error, event, notices: refusal_notices }) => {
            notices.extend(refusal_notices);
            // Counted here, where they are met; recorded in a transaction of their own (below).
            record_after.extend(event.map(|e| (e, true)));
            record_after.iter().for_each(|(event, _)| history::tally(event));
            LeaseStep { result: Err(error), notices, record_after }
        }
    }
}
