#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| conform::fuzz::targets::case_files(data));
