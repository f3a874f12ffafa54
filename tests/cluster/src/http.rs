//! A minimal HTTP/1.1 client for the sidecar's tests and benchmark: one keep-alive connection,
//! GET or POST, answers read by their Content-Length (or chunks). Every read and write gives up
//! after [`PATIENCE`], so that a server that stops answering fails the test instead of hanging it.

use crate::PATIENCE;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// One answer: its status, headers (names in lower case) and body.
#[derive(Debug, Clone)]
pub struct HttpReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpReply {
    /// The value of header `name` (any case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }
}

/// A keep-alive connection to `address` (`127.0.0.1:7070`).
pub struct Http {
    address: String,
    reader: BufReader<TcpStream>,
}

impl Http {
    pub fn connect(address: &str) -> std::io::Result<Http> {
        let stream = TcpStream::connect(address)?;
        stream.set_read_timeout(Some(PATIENCE))?;
        stream.set_write_timeout(Some(PATIENCE))?;
        stream.set_nodelay(true)?;
        Ok(Http { address: address.to_owned(), reader: BufReader::new(stream) })
    }

    pub fn get(&mut self, path: &str) -> std::io::Result<HttpReply> {
        self.request("GET", path, &[])
    }

    /// Sends `method path` with `headers`, and reads the answer.
    pub fn request(&mut self, method: &str, path: &str, headers: &[(&str, &str)]) -> std::io::Result<HttpReply> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.address);
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if method == "POST" {
            head.push_str("Content-Length: 0\r\n");
        }
        head.push_str("\r\n");
        self.reader.get_mut().write_all(head.as_bytes())?;
        self.read_reply()
    }

    fn read_line(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the server closed the connection"));
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_owned())
    }

    fn read_reply(&mut self) -> std::io::Result<HttpReply> {
        let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
        let status_line = self.read_line()?;
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("not a status line: {status_line}")))?;
        let mut headers = vec![];
        loop {
            let line = self.read_line()?;
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').ok_or_else(|| bad(format!("not a header: {line}")))?;
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
        let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let mut body = vec![];
        if let Some(length) = find("content-length") {
            let length: usize = length.parse().map_err(|_| bad(format!("Content-Length {length}")))?;
            body.resize(length, 0);
            self.reader.read_exact(&mut body)?;
        } else if find("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
            loop {
                let size = self.read_line()?;
                let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                    .map_err(|_| bad(format!("chunk size {size}")))?;
                let mut chunk = vec![0; size];
                self.reader.read_exact(&mut chunk)?;
                self.read_line()?;
                if size == 0 {
                    break;
                }
                body.extend(chunk);
            }
        }
        let body = String::from_utf8(body).map_err(|e| bad(format!("a body that is not UTF-8: {e}")))?;
        Ok(HttpReply { status, headers, body })
    }
}

/// `GET path` on a connection of its own; fails the test if the server cannot be reached or does
/// not answer within [`PATIENCE`].
pub fn http_get(address: &str, path: &str) -> HttpReply {
    http_request(address, "GET", path, &[])
}

/// `method path` with `headers`, on a connection of its own (see [`http_get`]).
pub fn http_request(address: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> HttpReply {
    Http::connect(address)
        .and_then(|mut c| c.request(method, path, headers))
        .unwrap_or_else(|e| panic!("{method} http://{address}{path}: {e}"))
}
