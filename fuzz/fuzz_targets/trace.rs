//! Trace files: any bytes give entries or a clear error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tessera_core::trace::read_trace;

fuzz_target!(|data: &[u8]| {
    for entry in read_trace(data, "fuzz.trace".into()).take(100_000) {
        if let Err(e) = entry {
            assert!(
                e.to_string().contains("fuzz.trace"),
                "error names the file: {e}"
            );
            break;
        }
    }
});
