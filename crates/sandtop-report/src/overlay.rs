//! The actions of a step drawn over the screenshot the model saw, as
//! inline SVG in the model's own coordinates (the SVG's viewBox is the
//! screenshot's size, whatever size the page shows it at).

use std::fmt::Write as _;

use sandtop_protocol::Action;

use super::html::esc;
use super::image::Embedded;

/// One action to draw, numbered as the step's list numbers it.
#[derive(Debug, Clone)]
pub struct Drawn<'a> {
    pub number: usize,
    pub action: &'a Action,
}

const STROKE: &str = "#ff1744";
const HALO: &str = "#ffffff";

/// An `<svg>` over an image of `width` x `height` (the model's space).
pub fn svg(width: u32, height: u32, actions: &[Drawn<'_>]) -> String {
    let unit = (f64::from(width.max(height)) / 100.0).max(4.0);
    let font = unit * 1.6;
    let mut out = format!(
        "<svg viewBox=\"0 0 {width} {height}\" \
         preserveAspectRatio=\"none\" font-family=\"sans-serif\" font-size=\"{font:.0}\" \
         aria-hidden=\"true\">"
    );
    // Actions without a point are labelled down the top-left corner.
    let mut corner = 0.0;
    for d in actions {
        let n = d.number;
        match d.action {
            Action::Click { button, x, y, keys } => {
                let label = format!(
                    "{n} click {}{}",
                    serde_json::to_value(button)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    held(keys)
                );
                ring(&mut out, *x, *y, unit * 1.5, "click");
                label_at(&mut out, *x as f64 + unit * 2.0, *y as f64 - unit, &label);
            }
            Action::DoubleClick { x, y, keys } => {
                ring(&mut out, *x, *y, unit * 1.5, "double_click");
                ring(&mut out, *x, *y, unit * 0.8, "double_click");
                let label = format!("{n} double click{}", held(keys));
                label_at(&mut out, *x as f64 + unit * 2.0, *y as f64 - unit, &label);
            }
            Action::Drag { path, keys } => {
                let points: Vec<String> = path.iter().map(|c| format!("{},{}", c.x, c.y)).collect();
                let _ = write!(
                    out,
                    "<polyline data-action=\"drag\" points=\"{}\" fill=\"none\" stroke=\"{STROKE}\" \
                     stroke-width=\"{:.1}\" stroke-linejoin=\"round\"/>",
                    points.join(" "),
                    unit * 0.4
                );
                if let (Some(a), Some(b)) = (path.first(), path.last()) {
                    dot(&mut out, a.x, a.y, unit * 0.7);
                    ring(&mut out, b.x, b.y, unit, "drag_end");
                    let label = format!("{n} drag{}", held(keys));
                    label_at(&mut out, a.x as f64 + unit * 1.5, a.y as f64 - unit, &label);
                }
            }
            Action::Scroll {
                x,
                y,
                scroll_x,
                scroll_y,
                keys,
            } => {
                ring(&mut out, *x, *y, unit, "scroll");
                // The arrow points where the content moves into view; its
                // length grows with the distance, within 2..8 units.
                let (dx, dy) = (*scroll_x as f64, *scroll_y as f64);
                let len = (dx * dx + dy * dy).sqrt();
                if len > 0.0 {
                    let shown = (len / 20.0).clamp(2.0, 8.0) * unit;
                    let (ex, ey) = (*x as f64 + dx / len * shown, *y as f64 + dy / len * shown);
                    arrow(&mut out, *x as f64, *y as f64, ex, ey, unit);
                }
                let label = format!("{n} scroll dx={scroll_x} dy={scroll_y}{}", held(keys));
                label_at(
                    &mut out,
                    *x as f64 + unit * 1.5,
                    *y as f64 + unit * 2.5,
                    &label,
                );
            }
            Action::Move { x, y, keys } => {
                let (cx, cy, r) = (*x as f64, *y as f64, unit);
                let _ = write!(
                    out,
                    "<path data-action=\"move\" d=\"M{} {cy} H{} M{cx} {} V{}\" stroke=\"{STROKE}\" \
                     stroke-width=\"{:.1}\"/>",
                    cx - r,
                    cx + r,
                    cy - r,
                    cy + r,
                    unit * 0.3
                );
                label_at(
                    &mut out,
                    cx + unit * 1.5,
                    cy - unit,
                    &format!("{n} move{}", held(keys)),
                );
            }
            other => {
                corner += font * 1.4;
                let text = match other {
                    Action::Type { text } => {
                        format!("{n} type \u{201c}{}\u{201d}", short(text, 80))
                    }
                    Action::Keypress { keys } => format!("{n} keypress {}", keys.join("+")),
                    Action::Wait {} => format!("{n} wait"),
                    Action::Screenshot {} => format!("{n} screenshot"),
                    _ => format!("{n} {}", other.kind()),
                };
                label_at(&mut out, unit, corner, &text);
            }
        }
    }
    out.push_str("</svg>");
    out
}

fn held(keys: &Option<Vec<String>>) -> String {
    match keys {
        Some(k) if !k.is_empty() => format!(" +{}", k.join("+")),
        _ => String::new(),
    }
}

/// At most `n` characters of `s`, with an ellipsis when cut.
pub fn short(s: &str, n: usize) -> String {
    let mut out: String = s.chars().take(n).collect();
    if s.chars().count() > n {
        out.push('\u{2026}');
    }
    out
}

fn ring(out: &mut String, x: i64, y: i64, r: f64, kind: &str) {
    let _ = write!(
        out,
        "<circle data-action=\"{kind}\" cx=\"{x}\" cy=\"{y}\" r=\"{r:.1}\" fill=\"none\" \
         stroke=\"{HALO}\" stroke-width=\"{:.1}\"/><circle cx=\"{x}\" cy=\"{y}\" r=\"{r:.1}\" \
         fill=\"none\" stroke=\"{STROKE}\" stroke-width=\"{:.1}\"/>",
        r * 0.35,
        r * 0.18
    );
}

fn dot(out: &mut String, x: i64, y: i64, r: f64) {
    let _ = write!(
        out,
        "<circle cx=\"{x}\" cy=\"{y}\" r=\"{r:.1}\" fill=\"{STROKE}\"/>"
    );
}

fn arrow(out: &mut String, x0: f64, y0: f64, x1: f64, y1: f64, unit: f64) {
    let (dx, dy) = (x1 - x0, y1 - y0);
    let len = (dx * dx + dy * dy).sqrt().max(1e-6);
    let (ux, uy) = (dx / len, dy / len);
    let head = unit * 1.2;
    let (lx, ly) = (
        x1 - ux * head - uy * head * 0.6,
        y1 - uy * head + ux * head * 0.6,
    );
    let (rx, ry) = (
        x1 - ux * head + uy * head * 0.6,
        y1 - uy * head - ux * head * 0.6,
    );
    let _ = write!(
        out,
        "<path data-action=\"scroll_arrow\" d=\"M{x0:.1} {y0:.1} L{x1:.1} {y1:.1} M{lx:.1} {ly:.1} \
         L{x1:.1} {y1:.1} L{rx:.1} {ry:.1}\" fill=\"none\" stroke=\"{STROKE}\" stroke-width=\"{:.1}\" \
         stroke-linecap=\"round\"/>",
        unit * 0.4
    );
}

/// A label with a light outline, so it reads on any background.
fn label_at(out: &mut String, x: f64, y: f64, text: &str) {
    let t = esc(text);
    let _ = write!(
        out,
        "<text x=\"{x:.0}\" y=\"{y:.0}\" fill=\"{STROKE}\" stroke=\"{HALO}\" stroke-width=\"4\" \
         paint-order=\"stroke\" font-weight=\"bold\">{t}</text>"
    );
}

/// A screenshot with these actions drawn over it, and its caption.
pub fn figure(e: &Embedded, file: &str, actions: &[Drawn<'_>]) -> String {
    format!(
        "<div class=\"shot\"><img src=\"{}\" width=\"{}\" height=\"{}\" alt=\"{}\">{}</div>\n\
         <p class=\"muted\">{} ({}x{}, shown at {}x{})</p>\n",
        e.uri,
        e.width,
        e.height,
        esc(file),
        svg(e.source_width, e.source_height, actions),
        esc(file),
        e.source_width,
        e.source_height,
        e.width,
        e.height
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandtop_protocol::{Button, Coord};

    #[test]
    fn each_kind_is_drawn_where_the_model_pointed() {
        let actions = [
            Action::Click {
                button: Button::Right,
                x: 400,
                y: 300,
                keys: None,
            },
            Action::Drag {
                path: vec![Coord { x: 10, y: 20 }, Coord { x: 30, y: 40 }],
                keys: None,
            },
            Action::Scroll {
                x: 50,
                y: 60,
                scroll_x: 0,
                scroll_y: 300,
                keys: None,
            },
            Action::Type {
                text: "</text><script>x</script>".into(),
            },
        ];
        let drawn: Vec<Drawn<'_>> = actions
            .iter()
            .enumerate()
            .map(|(i, a)| Drawn {
                number: i + 1,
                action: a,
            })
            .collect();
        let s = svg(1280, 800, &drawn);
        assert!(s.contains("viewBox=\"0 0 1280 800\""));
        assert!(
            s.contains("data-action=\"click\" cx=\"400\" cy=\"300\""),
            "{s}"
        );
        assert!(s.contains("1 click right"));
        assert!(s.contains("points=\"10,20 30,40\""));
        assert!(s.contains("data-action=\"scroll\" cx=\"50\" cy=\"60\""));
        assert!(s.contains("dx=0 dy=300"));
        // Scrolling down: the arrow ends below its start.
        assert!(s.contains("d=\"M50.0 60.0 L50.0 "), "{s}");
        assert!(!s.contains("<script>") && s.contains("&lt;script&gt;"));
    }
}
