//! The in-process fuzz targets: each takes arbitrary bytes, runs one of
//! conform's decoders, validators, parsers or reference handlers, and
//! asserts an oracle (a round trip, lengths that add up, agreement with
//! another reading). The cargo-fuzz targets in `fuzz/` are shims into
//! these; `tests/fuzz_inputs.rs` replays every stored input through them, so
//! a CI without cargo-fuzz still guards each crash ever found.

use crate::protocols::{acp, agent_socket, cwx};
use crate::wire::LineDecoder;
use crate::wire::frame::{self, FrameDecoder, MAX_FRAME};
use serde_json::Value;

/// A fuzz target: arbitrary bytes in, a panic when its oracle fails.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/<name>.rs` calls it.
pub const TARGETS: &[(&str, Target)] = &[
    ("line_decoder", line_decoder),
    ("frame_decoder", frame_decoder),
    ("frame_round_trip", frame_round_trip),
    ("jsonrpc_reply", jsonrpc_reply),
    ("acp_monitor", acp_monitor),
    ("cwx_parsers", cwx_parsers),
    ("case_files", case_files),
    ("agent_socket_reference", agent_socket_reference),
    ("acp_reference", acp_reference),
    ("cwx_reference", cwx_reference),
];

/// Runs the target called `name`; false when there is none.
pub fn run(name: &str, data: &[u8]) -> bool {
    match TARGETS.iter().find(|(n, _)| *n == name) {
        Some((_, f)) => {
            f(data);
            true
        }
        None => false,
    }
}

/// Splits `data` into a small parameter (its first byte) and the rest.
fn param(data: &[u8]) -> (usize, &[u8]) {
    match data.split_first() {
        Some((p, rest)) => (usize::from(*p), rest),
        None => (0, data),
    }
}

/// The line decoder over `data` fed in pieces: every line is within the
/// limit and has no newline; what it consumed adds up to the input; and
/// when nothing was too long, the lines and the rest are the input again.
pub fn line_decoder(data: &[u8]) {
    let (p, data) = param(data);
    let limit = p % 64;
    let piece = p / 64 + 1;
    let mut d = LineDecoder::new(limit);
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut too_long = false;
    let mut consumed = 0;
    for chunk in data.chunks(piece) {
        let mut rest = chunk;
        loop {
            let (used, item) = d.feed(rest);
            assert!(used <= rest.len());
            let stalled = used == 0 && item.is_none();
            consumed += used;
            rest = &rest[used..];
            match item {
                Some(Ok(line)) => {
                    assert!(line.len() <= limit && !line.contains(&b'\n'));
                    lines.push(line);
                }
                Some(Err(_)) => too_long = true,
                None => {}
            }
            assert!(d.pending().len() <= limit);
            if rest.is_empty() {
                break;
            }
            assert!(!stalled, "the decoder made no progress");
        }
    }
    assert_eq!(consumed, data.len());
    if !too_long {
        let mut again: Vec<u8> = Vec::new();
        for l in &lines {
            again.extend(l);
            again.push(b'\n');
        }
        again.extend(d.pending());
        assert_eq!(again, data);
    }
}

/// The frame decoder over arbitrary bytes: what it consumed adds up; a
/// payload it returns is the length its header said, within the limit; after
/// an error it stays broken and returns nothing more.
pub fn frame_decoder(data: &[u8]) {
    let (p, data) = param(data);
    let mut d = FrameDecoder::new(MAX_FRAME);
    let mut broken = false;
    let mut payload_bytes = 0;
    for chunk in data.chunks(p + 1) {
        let mut piece = chunk;
        while !piece.is_empty() {
            let (used, item) = d.feed(piece);
            assert!(used <= piece.len());
            piece = &piece[used..];
            match item {
                Some(Ok(payload)) => {
                    assert!(!broken, "a frame after an error");
                    assert!(payload.len() <= MAX_FRAME);
                    payload_bytes += payload.len() + 8;
                }
                Some(Err(_)) => broken = true,
                None if used == 0 => break,
                None => {}
            }
        }
    }
    assert!(payload_bytes <= data.len());
}

/// Frames made from pieces of `data` decode back to the same payloads,
/// however the bytes are cut.
pub fn frame_round_trip(data: &[u8]) {
    let (p, data) = param(data);
    let payloads: Vec<&[u8]> = data.split(|b| *b == 0xFF).collect();
    let mut wire = Vec::new();
    for pl in &payloads {
        wire.extend(frame::encode(pl).expect("small payloads encode"));
    }
    let mut d = FrameDecoder::new(MAX_FRAME);
    let mut out: Vec<Vec<u8>> = Vec::new();
    for chunk in wire.chunks(p + 1) {
        let mut piece = chunk;
        while !piece.is_empty() {
            let (used, item) = d.feed(piece);
            piece = &piece[used..];
            match item {
                Some(Ok(payload)) => out.push(payload),
                Some(Err(e)) => panic!("a frame conform encoded was refused: {e:?}"),
                None if used == 0 => break,
                None => {}
            }
        }
    }
    assert_eq!(out.len(), payloads.len());
    for (a, b) in out.iter().zip(&payloads) {
        assert_eq!(a.as_slice(), *b);
    }
    assert!(d.at_boundary());
}

/// The reply classifier and the envelope rules: a reply it reads is a JSON
/// object; the rules run on any id without a panic; the kind agrees with
/// the members.
pub fn jsonrpc_reply(data: &[u8]) {
    if let Ok(reply) = crate::jsonrpc::classify_reply(data) {
        assert!(crate::jsonrpc::parse_json(data).is_ok_and(|v| v.is_object()));
        let id = reply.object.get("id").cloned();
        let _ = crate::jsonrpc::envelope_violations(&reply, id.as_ref());
        let _ = crate::jsonrpc::envelope_violations(&reply, None);
        if let crate::jsonrpc::ReplyKind::Result(r) = &reply.kind {
            assert!(!r.is_null());
        }
    }
    let _ = crate::jsonrpc::is_compact_json(data);
}

/// The ACP monitor reads any lines an agent may write; every violation it
/// reports names a requirement of the catalogue.
pub fn acp_monitor(data: &[u8]) {
    let catalogue = acp::AGENT.catalogue();
    let mut m = acp::monitor::Monitor::new();
    m.sent(
        &serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}}),
    );
    for line in data.split(|b| *b == b'\n').take(64) {
        let _ = m.received(line);
    }
    for v in &m.violations {
        assert!(
            catalogue.get(&v.requirement).is_some(),
            "{} is not in the catalogue",
            v.requirement
        );
    }
}

/// The cwx parsers on any JSON: they decide the same way twice, and a host
/// message they admit is one the table has for that tier.
pub fn cwx_parsers(data: &[u8]) {
    let Ok(value) = crate::jsonrpc::parse_json(data) else {
        return;
    };
    for tier in cwx::table::ALL_TIERS {
        let a = cwx::validate::parse_host_message(value.clone(), *tier);
        let b = cwx::validate::parse_host_message(value.clone(), *tier);
        assert_eq!(a.is_ok(), b.is_ok());
        if let Ok(cwx::validate::HostMessage::Request { method, .. })
        | Ok(cwx::validate::HostMessage::Notification { method, .. }) = &a
        {
            let spec = cwx::table::method(cwx::table::Direction::HostToCore, method)
                .expect("an admitted method is in the table");
            assert!(spec.tiers.contains(tier));
        }
        let _ = cwx::validate::parse_core_message(value.clone(), *tier);
    }
}

/// Case files of every suite's dialect: parsing and checking never panic,
/// and a case that parses keeps its id.
pub fn case_files(data: &[u8]) {
    fn read<D: crate::case::Dialect>(text: &str) {
        if let Ok(cases) = crate::case::parse_cases::<D>("fuzz", text) {
            for c in &cases {
                assert!(!c.id.is_empty() || text.contains("\"id\""));
                let _ = D::check(c);
            }
        }
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    read::<agent_socket::ServerCases>(text);
    read::<agent_socket::ClientCases>(text);
    read::<acp::AgentCases>(text);
    read::<acp::ClientCases>(text);
    read::<cwx::HostCases>(text);
    read::<cwx::CoreCases>(text);
}

/// The reference server's request handler: every reply it writes is a
/// JSON-RPC 2.0 response with exactly one of `result` and `error`, and its
/// id is the request's or null.
pub fn agent_socket_reference(data: &[u8]) {
    let config = agent_socket::reference::Config {
        workspace: "/nonexistent/conform-fuzz".into(),
        python: "python3".into(),
    };
    if let agent_socket::reference::Action::Reply(reply) =
        agent_socket::reference::handle_line(&config, data)
    {
        let line = serde_json::to_vec(&reply).expect("a reply serialises");
        let parsed = crate::jsonrpc::classify_reply(&line).expect("a reply is a JSON object");
        let request_id = serde_json::from_slice::<Value>(data)
            .ok()
            .and_then(|v| v.get("id").cloned());
        let echoed = parsed.object.get("id").cloned().unwrap_or(Value::Null);
        let expected = if echoed.is_null() { None } else { request_id };
        let violations = crate::jsonrpc::envelope_violations(&parsed, expected.as_ref());
        assert!(violations.is_empty(), "{violations:?} for {reply}");
    }
}

/// The reference agent's handler over any lines: everything it writes is a
/// JSON-RPC 2.0 message object on one line.
pub fn acp_reference(data: &[u8]) {
    let mut agent = acp::reference::Agent::new();
    let now = std::time::Instant::now();
    for line in data.split(|b| *b == b'\n').take(32) {
        for out in agent.handle(line, now) {
            assert_eq!(out.get("jsonrpc").and_then(Value::as_str), Some("2.0"));
            let text = serde_json::to_string(&out).expect("a message serialises");
            assert!(!text.contains('\n'));
        }
    }
}

/// The reference host's handler over any payloads: everything it writes
/// passes the core's strict parser for its tier, except an answer to a
/// payload no core would send (its id may be null, or one no core uses: the
/// reading `cwx::driver` takes), which is still a JSON-RPC 2.0 response.
pub fn cwx_reference(data: &[u8]) {
    let (p, data) = param(data);
    let tier = if p % 2 == 0 {
        cwx::table::Tier::Plugin
    } else {
        cwx::table::Tier::Builtin
    };
    let mut host = cwx::reference::Host::new(tier);
    let hello = host.hello();
    assert!(cwx::validate::parse_host_message(hello, tier).is_ok());
    for payload in data.split(|b| *b == 0xFF).take(32) {
        let from_a_core = serde_json::from_slice::<Value>(payload)
            .is_ok_and(|v| cwx::validate::parse_core_message(v, tier).is_ok());
        for out in host.handle(payload) {
            if !from_a_core && out.get("method").is_none() {
                assert_eq!(out.get("jsonrpc").and_then(Value::as_str), Some("2.0"));
                assert!(out.get("result").is_some() != out.get("error").is_some());
                continue;
            }
            if let Err(why) = cwx::validate::parse_host_message(out.clone(), tier) {
                panic!("the reference host wrote {out}, which the core refuses: {why}");
            }
        }
    }
}
