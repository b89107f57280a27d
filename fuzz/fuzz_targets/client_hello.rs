//! The egress proxy's ClientHello reader (rustls' Acceptor), fed the input
//! in pieces whose sizes come from the input: the answer never depends on
//! how the bytes were cut.
#![no_main]
use host_cli::egress::proxy::{HelloReader, Sni};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&cut, bytes)) = data.split_first() else {
        return;
    };
    let whole = HelloReader::new().push(bytes);
    let mut r = HelloReader::new();
    let mut last = Sni::Incomplete;
    for piece in bytes.chunks(usize::from(cut.max(1))) {
        last = r.push(piece);
    }
    match (&whole, &last) {
        (Sni::NotTls(_), Sni::NotTls(_)) => {}
        _ => assert_eq!(whole, last),
    }
});
