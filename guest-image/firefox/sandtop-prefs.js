// Sandtop guest: background services of Firefox that policies.json cannot
// switch off (its Preferences policy refuses these names). Debian's Firefox
// ESR reads every file of /etc/firefox-esr as default preferences, and
// `locked` keeps a profile from changing them. Values as Firefox's own
// remote agent sets them for automation (RecommendedPreferences). Issue 30
// item 8; docs/security.md.
pref("app.normandy.enabled", false, locked);
pref("app.normandy.api_url", "", locked);
pref("general.useragent.updates.enabled", false, locked);
