//! Hand-built TLS ClientHellos for the egress proxy's tests: the proxy
//! reads the server name (SNI) of the first handshake message, so the tests
//! need hellos with chosen names, split across records where they choose.
//! Minimal but well-formed: TLS 1.3 only, one cipher suite, null
//! compression, supported_versions and signature_algorithms (rustls'
//! `Acceptor` wants both), and a server_name extension when names are
//! given. No crypto: nothing here could complete a handshake.

/// The handshake message of a ClientHello naming `names` in one
/// server_name extension (none: no extension; more than one is what RFC
/// 6066 forbids, for the tests that check the refusal).
pub fn client_hello_message(names: &[&str]) -> Vec<u8> {
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[7u8; 32]); // random
    body.push(0); // session id
    body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
    body.extend_from_slice(&[1, 0]); // null compression
    let mut ext = Vec::new();
    // supported_versions: TLS 1.3; signature_algorithms: rsa_pss_rsae_sha256.
    ext.extend_from_slice(&[0, 0x2b, 0, 3, 2, 3, 4]);
    ext.extend_from_slice(&[0, 0x0d, 0, 4, 0, 2, 8, 4]);
    if !names.is_empty() {
        let mut list = Vec::new();
        for n in names {
            list.push(0u8); // host_name
            list.extend_from_slice(&u16_len(n.len()));
            list.extend_from_slice(n.as_bytes());
        }
        let mut sn = u16_len(list.len()).to_vec();
        sn.extend_from_slice(&list);
        ext.extend_from_slice(&[0, 0]);
        ext.extend_from_slice(&u16_len(sn.len()));
        ext.extend_from_slice(&sn);
    }
    body.extend_from_slice(&u16_len(ext.len()));
    body.extend_from_slice(&ext);
    let mut hs = vec![1, 0]; // client_hello, 24-bit length
    hs.extend_from_slice(&u16_len(body.len()));
    hs.extend_from_slice(&body);
    hs
}

/// TLS handshake records carrying `message`, cut after each offset of
/// `cuts` (ascending, inside the message).
pub fn handshake_records(message: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut start = 0;
    for end in cuts.iter().copied().chain([message.len()]) {
        let part = &message[start..end];
        out.extend_from_slice(&[0x16, 3, 1]);
        out.extend_from_slice(&u16_len(part.len()));
        out.extend_from_slice(part);
        start = end;
    }
    out
}

/// A ClientHello naming `sni`, in one record.
pub fn client_hello(sni: &str) -> Vec<u8> {
    handshake_records(&client_hello_message(&[sni]), &[])
}

/// The same ClientHello, its handshake message split across two records.
pub fn client_hello_in_two_records(sni: &str) -> Vec<u8> {
    let msg = client_hello_message(&[sni]);
    handshake_records(&msg, &[msg.len() / 2])
}

/// A length as the two big-endian bytes TLS puts before a field; the
/// hellos here are far below 64 KiB.
fn u16_len(n: usize) -> [u8; 2] {
    u16::try_from(n)
        .expect("a test ClientHello field over 64 KiB")
        .to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_carry_the_message_and_lengths_add_up() {
        let msg = client_hello_message(&["allowed.test"]);
        assert_eq!(msg[0], 1);
        assert_eq!(
            usize::from(u16::from_be_bytes([msg[2], msg[3]])),
            msg.len() - 4
        );
        let one = client_hello("allowed.test");
        assert_eq!(&one[..3], &[0x16, 3, 1]);
        assert_eq!(&one[5..], &msg[..]);
        let two = client_hello_in_two_records("allowed.test");
        assert_eq!(two.len(), one.len() + 5);
        let cut = msg.len() / 2;
        assert_eq!(&two[5..5 + cut], &msg[..cut]);
        assert_eq!(&two[10 + cut..], &msg[cut..]);
        // No names, no server_name extension: shorter by its 4-byte header,
        // the list length and the entry.
        let none = client_hello_message(&[]);
        assert_eq!(none.len(), msg.len() - (4 + 2 + 3 + "allowed.test".len()));
    }
}
