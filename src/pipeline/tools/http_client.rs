//! A minimal HTTP/1.1 client for the one request sandpit makes itself: a `host_exec`
//! validator at an `http://` URL (`POST`, a JSON body, `Connection: close`). No TLS, no
//! redirects, no proxies; the answer is bounded in size. (For https, a validator command such
//! as curl does the job.)

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The largest answer read.
const MAX_ANSWER: usize = 256 * 1024;

/// `http://host[:port][/path]` split into the address to connect to, the `Host` header and
/// the path.
pub fn parse_url(url: &str) -> Result<(String, String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url:?} is not an http:// URL"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(format!("{url:?}: a host is needed (and no user info)"));
    }
    let has_port = match authority.rfind(':') {
        Some(i) => !authority[i..].contains(']'),
        None => false,
    };
    let addr = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    Ok((addr, authority.to_string(), path.to_string()))
}

/// POSTs `body` as JSON to `url`; the status and the body of the answer.
pub async fn post_json(url: &str, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let (addr, host, path) = parse_url(url)?;
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\nUser-Agent: sandpit\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| format!("sending to {addr}: {e}"))?;
    stream
        .write_all(body)
        .await
        .map_err(|e| format!("sending to {addr}: {e}"))?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| format!("reading from {addr}: {e}"))?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if answer.len() > MAX_ANSWER {
            return Err(format!(
                "the answer from {addr} is larger than {MAX_ANSWER} bytes"
            ));
        }
    }
    parse_response(&answer)
}

/// The status and body of a complete HTTP/1.x response (`Content-Length`, chunked, or up to
/// the end of the connection).
pub fn parse_response(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("an incomplete HTTP answer")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let body = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .filter(|_| status_line.starts_with("HTTP/1."))
        .ok_or_else(|| format!("not an HTTP answer: {status_line:?}"))?;
    let mut chunked = false;
    let mut length = None;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
            chunked = true;
        } else if k == "content-length" {
            length = v.parse::<usize>().ok();
        }
    }
    if chunked {
        let mut out = Vec::new();
        let mut rest = body;
        loop {
            let nl = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or("a truncated chunked body")?;
            let size_text = String::from_utf8_lossy(&rest[..nl]);
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| "a malformed chunk size")?;
            rest = &rest[nl + 2..];
            if size == 0 {
                return Ok((status, out));
            }
            if rest.len() < size {
                return Err("a truncated chunk".into());
            }
            out.extend_from_slice(&rest[..size]);
            rest = rest.get(size + 2..).unwrap_or_default();
        }
    }
    match length {
        Some(n) if body.len() >= n => Ok((status, body[..n].to_vec())),
        Some(_) => Err("a truncated body".into()),
        None => Ok((status, body.to_vec())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split() {
        assert_eq!(
            parse_url("http://127.0.0.1:8081/judge").unwrap(),
            (
                "127.0.0.1:8081".into(),
                "127.0.0.1:8081".into(),
                "/judge".into()
            )
        );
        assert_eq!(
            parse_url("http://judge.local").unwrap(),
            ("judge.local:80".into(), "judge.local".into(), "/".into())
        );
        assert_eq!(parse_url("http://[::1]:9/x").unwrap().0, "[::1]:9");
        assert_eq!(parse_url("http://[::1]/x").unwrap().0, "[::1]:80");
        assert!(parse_url("https://x").is_err());
        assert!(parse_url("http://u:p@x/").is_err());
    }

    #[test]
    fn answers_parse() {
        let r = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}extra";
        assert_eq!(parse_response(r).unwrap(), (200, b"{}".to_vec()));
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n";
        assert_eq!(parse_response(r).unwrap(), (200, b"{\"a\":1}".to_vec()));
        let r = b"HTTP/1.1 503 Busy\r\n\r\nlater";
        assert_eq!(parse_response(r).unwrap(), (503, b"later".to_vec()));
        assert!(parse_response(b"SSH-2.0\r\n\r\n").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}").is_err());
    }

    #[tokio::test]
    async fn posts_to_a_loopback_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            while !String::from_utf8_lossy(&got).contains("{\"q\":1}") {
                let n = s.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n{\"risk\":0.1}")
                .await
                .unwrap();
            String::from_utf8_lossy(&got).into_owned()
        });
        let (status, body) = post_json(&format!("http://{addr}/judge"), b"{\"q\":1}")
            .await
            .unwrap();
        assert_eq!(status, 200);
        assert_eq!(body, b"{\"risk\":0.1}");
        let request = server.await.unwrap();
        assert!(request.starts_with("POST /judge HTTP/1.1\r\n"), "{request}");
        assert!(request.contains("Content-Length: 7\r\n"), "{request}");
    }
}
