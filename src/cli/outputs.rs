//! `sandpit run --save-outputs DIR`: a result's rich outputs as files a person can open (a
//! matplotlib figure as `output-1.png`, a table's HTML as `output-2.html`). Binary outputs are
//! decoded from their base64; text is written as it is. Existing files are never overwritten:
//! numbering continues after the highest `output-N.*` already in DIR.

use crate::types::Output;
use base64::Engine as _;
use std::io::Write;
use std::path::Path;

/// The file extension for a MIME type (`bin` for one sandpit does not know).
fn extension(mime: &str) -> &'static str {
    match mime {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/svg+xml" => "svg",
        "text/html" => "html",
        "text/markdown" => "md",
        "text/latex" => "tex",
        "application/json" => "json",
        "application/javascript" => "js",
        "text/plain" => "txt",
        _ => "bin",
    }
}

/// The highest N of the `output-N.*` files already in `dir`.
fn highest_taken(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_prefix("output-")?
                .split('.')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

/// Writes each output to `dir` (created if missing); one line per file for the user.
pub fn save(dir: &Path, outputs: &[Output]) -> crate::Result<Vec<String>> {
    if outputs.is_empty() {
        return Ok(Vec::new());
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| crate::Error::io(format!("create {}", dir.display()), e))?;
    let mut n = highest_taken(dir);
    let mut saved = Vec::new();
    for o in outputs {
        let bytes = if o.is_base64() {
            base64::engine::general_purpose::STANDARD
                .decode(o.data.as_bytes())
                .map_err(|e| {
                    crate::Error::sandbox(format!("an {} output is not valid base64: {e}", o.mime))
                })?
        } else {
            o.data.clone().into_bytes()
        };
        n += 1;
        let path = dir.join(format!("output-{n}.{}", extension(&o.mime)));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| f.write_all(&bytes));
        written.map_err(|e| crate::Error::io(format!("write {}", path.display()), e))?;
        saved.push(format!(
            "{} ({}, {}, {} bytes)",
            path.display(),
            o.kind,
            o.mime,
            bytes.len()
        ));
    }
    Ok(saved)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(kind: &str, mime: &str, data: &str) -> Output {
        Output {
            kind: kind.into(),
            mime: mime.into(),
            data: data.into(),
        }
    }

    #[test]
    fn outputs_become_numbered_files_and_nothing_is_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let png = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG\r\n\x1a\nfake");
        let first = vec![
            out("display_data", "image/png", &png),
            out("execute_result", "text/html", "<b>hi</b>"),
        ];
        let saved = save(dir.path(), &first).unwrap();
        assert_eq!(saved.len(), 2);
        assert!(saved[0].contains("output-1.png (display_data, image/png, 12 bytes)"));
        assert_eq!(
            std::fs::read(dir.path().join("output-1.png")).unwrap(),
            b"\x89PNG\r\n\x1a\nfake"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("output-2.html")).unwrap(),
            "<b>hi</b>"
        );
        // A second run into the same directory goes on from 3.
        let saved = save(dir.path(), &[out("execute_result", "text/plain", "42")]).unwrap();
        assert!(saved[0].contains("output-3.txt"), "{saved:?}");
        assert!(save(dir.path(), &[]).unwrap().is_empty());
    }

    #[test]
    fn a_binary_output_that_is_not_base64_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = save(
            dir.path(),
            &[out("display_data", "image/png", "not base64!")],
        )
        .unwrap_err();
        assert!(e.to_string().contains("not valid base64"), "{e}");
    }
}
