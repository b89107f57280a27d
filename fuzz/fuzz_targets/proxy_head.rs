//! The egress proxy's reading of a request head: the request line and
//! headers as hyper parses them (httparse, the same parser), then
//! `request_target`: CONNECT authority, absolute `http://` URL, Host
//! headers. Properties: no panic; a target that is read names an origin
//! whose printed form parses back to it; CONNECT targets are https with no
//! path; two Host headers are never accepted.
#![no_main]
use host_cli::egress::policy::{Origin, Scheme};
use host_cli::egress::proxy::request_target;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, header};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = req.parse(data) else {
        return;
    };
    let (Some(method), Some(path)) = (req.method, req.path) else {
        return;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return;
    };
    let Ok(uri) = path.parse::<Uri>() else {
        return;
    };
    let mut map = HeaderMap::new();
    for h in req.headers.iter() {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_bytes(h.value),
        ) else {
            return;
        };
        map.append(name, value);
    }
    let Ok(t) = request_target(&method, &uri, &map) else {
        return;
    };
    assert_eq!(t.origin.to_string().parse::<Origin>().ok(), Some(t.origin.clone()));
    assert!(map.get_all(header::HOST).iter().count() <= 1);
    if method == Method::CONNECT {
        assert_eq!((t.origin.scheme, &t.path), (Scheme::Https, &None));
    } else {
        assert_eq!(t.origin.scheme, Scheme::Http);
        assert!(t.path.is_some_and(|p| p.scheme().is_none() && p.authority().is_none()));
    }
});
