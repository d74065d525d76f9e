#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| conform::fuzz::targets::agent_socket_reference(data));
