//! The golden message corpus (`corpus/cwx/messages/`): messages and raw
//! frames, each with the verdict the seed's parser gives and why. conform's
//! own reading must agree with every entry (a test), and other
//! implementations can replay the same files.

use super::table::Tier;
use super::validate;
use crate::wire::frame::FrameDecoder;
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub id: String,
    /// `host_to_core` or `core_to_host`.
    pub direction: String,
    /// The tier of the host that sends or is sent the message.
    pub tier: String,
    #[serde(default)]
    pub message: Option<Value>,
    /// Raw bytes of a channel, in hex, read as frames up to its end.
    #[serde(default)]
    pub frame_hex: Option<String>,
    /// `accept` or `reject`.
    pub verdict: String,
    /// A part of the refusal's wording, for rejected entries.
    #[serde(default)]
    pub error_contains: Option<String>,
    pub why: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[allow(dead_code)]
    protocol: String,
    entries: Vec<Entry>,
}

/// Every entry of the embedded corpus.
pub fn entries() -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    for (path, text) in crate::corpus::files_under("cwx/messages") {
        let f: File = serde_json::from_str(text).map_err(|e| format!("corpus/{path}: {e}"))?;
        out.extend(f.entries);
    }
    Ok(out)
}

/// conform's verdict on one entry: `Ok` when accepted, the reason otherwise.
pub fn judge(entry: &Entry) -> Result<(), String> {
    let tier = Tier::parse(&entry.tier).ok_or_else(|| format!("unknown tier {:?}", entry.tier))?;
    let host_to_core = match entry.direction.as_str() {
        "host_to_core" => true,
        "core_to_host" => false,
        other => return Err(format!("unknown direction {other:?}")),
    };
    let read = |v: Value| {
        if host_to_core {
            validate::parse_host_message(v, tier).map(|_| ())
        } else {
            validate::parse_core_message(v, tier).map_err(|r| r.why)
        }
    };
    match (&entry.message, &entry.frame_hex) {
        (Some(m), None) => read(m.clone()),
        (None, Some(hex)) => {
            let bytes = crate::case::hex_bytes(hex).ok_or("frame_hex is not hex")?;
            // Each frame is read, then handled, before the next one is read.
            read_frames(&bytes, &mut |payload| {
                let v: Value = serde_json::from_slice(payload)
                    .map_err(|e| format!("frame payload is not JSON: {e}"))?;
                read(v)
            })
        }
        _ => Err("an entry has exactly one of message and frame_hex".into()),
    }
}

/// Hands each payload of a whole channel's bytes to `handle` as it is
/// read; an error for a broken frame, a refused payload, or a stream that
/// ends inside a frame.
pub fn read_frames(
    mut bytes: &[u8],
    handle: &mut dyn FnMut(&[u8]) -> Result<(), String>,
) -> Result<(), String> {
    let mut d = FrameDecoder::default();
    while !bytes.is_empty() {
        let (used, got) = d.feed(bytes);
        bytes = &bytes[used..];
        match got {
            Some(Ok(p)) => handle(&p)?,
            Some(Err(e)) => return Err(e.to_string()),
            None => {}
        }
    }
    if !d.at_boundary() {
        return Err(format!(
            "unexpected end of stream inside a frame ({} bytes of it read)",
            d.pending_len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conform_agrees_with_every_corpus_entry() {
        let entries = entries().unwrap();
        assert!(entries.len() > 300, "{}", entries.len());
        let mut wrong = Vec::new();
        let mut ids = std::collections::BTreeSet::new();
        for e in &entries {
            assert!(ids.insert(e.id.clone()), "duplicate entry {}", e.id);
            match (judge(e), e.verdict.as_str()) {
                (Ok(()), "accept") => {}
                (Err(why), "reject") => {
                    if let Some(want) = &e.error_contains
                        && !why.contains(want.as_str())
                    {
                        wrong.push(format!(
                            "{}: refused for {why:?}, the corpus says {want:?}",
                            e.id
                        ));
                    }
                }
                (Ok(()), _) => wrong.push(format!("{}: accepted, the corpus says reject", e.id)),
                (Err(why), _) => {
                    wrong.push(format!("{}: refused ({why}), the corpus says accept", e.id))
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{} disagreements:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
    }

    #[test]
    fn every_method_of_the_table_has_a_valid_and_an_invalid_entry() {
        let entries = entries().unwrap();
        for m in super::super::table::METHODS {
            let of = |verdict: &str| {
                entries.iter().any(|e| {
                    e.direction == m.direction.as_str()
                        && e.verdict == verdict
                        && e.message
                            .as_ref()
                            .and_then(|v| v.get("method"))
                            .and_then(Value::as_str)
                            == Some(m.name)
                })
            };
            assert!(
                of("reject"),
                "no invalid entry for {} {}",
                m.direction.as_str(),
                m.name
            );
            let builtin_only_c2h = m.direction == super::super::table::Direction::CoreToHost
                && !m.tiers.contains(&Tier::Plugin);
            assert!(
                builtin_only_c2h || of("accept"),
                "no valid entry for {} {}",
                m.direction.as_str(),
                m.name
            );
        }
    }
}
