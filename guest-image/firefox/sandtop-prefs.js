// Sandtop guest: background services of Firefox that policies.json cannot
// switch off (its Preferences policy refuses these names). Debian's Firefox
// ESR reads every file of /etc/firefox-esr as default preferences, and
// `locked` keeps a profile from changing them. Values as Firefox's own
// remote agent sets them for automation (RecommendedPreferences). Issue 30
// item 8; docs/security.md.
pref("app.normandy.enabled", false, locked);
pref("app.normandy.api_url", "", locked);
pref("general.useragent.updates.enabled", false, locked);

// A screen that holds still (issue 31, replay): GTK's overlay scrollbars
// appear on a page's load and fade out a second later, so the same page
// looks different depending on when it is looked at, by a model or by a
// replay comparing it with a recording. Shown always, they look the same
// at every moment (and a model sees that the page scrolls). The scrollbar
// stays an overlay: the page's layout does not change.
pref("layout.testing.overlay-scrollbars.always-visible", true, locked);
// The browser's cosmetic animations stay on: the tab's spinning throbber
// keeps the screen changing while a page loads, so a `wait` (which ends on
// a quiet screen) lasts until the page has loaded; with them off the
// throbber is a still hourglass and a wait ended mid-load.
// The address bar greys the scheme and port of a URL some time after a
// page has loaded (seen: a screenshot with the whole URL dark, the next
// with "http://" and ":8080" grey): one look at every moment.
pref("browser.urlbar.formatting.enabled", false, locked);
