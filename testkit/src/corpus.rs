//! The typing corpus the tiers type into real terminals and windows
//! (daemon/tests/x11.rs, tests/tests/e2e.rs, host-cli/tests/qemu.rs).

/// ASCII, accents, CJK, emoji, shell metacharacters (`$(...)`, backticks,
/// quotes), a leading dash, tabs and newlines; more than 19 distinct
/// characters off the keyboard layout, so spare keycodes get recycled.
/// `MARK` is replaced by each test: a file `/tmp/sandtop-pwned-MARK` must
/// never appear (nothing of the text runs).
pub const TYPING: &str = "-rf --no-preserve-root\nHello, World! éüß€中ж✓ 日本語の文字列と한국어 🙂🚀\n\
$(touch /tmp/sandtop-pwned-MARK) `touch /tmp/sandtop-pwned-MARK` 'single' \"double\" \\back\\slash\n\
\ttab\tseparated\tcolumns\nÀÉÎÕÜ àéîõü ñ ç ø å æ œ ĳ ŀ ł ő ű ș ț ğ ı İ ş\n";
