//! What a record of input events leaves pressed: the check that a batch,
//! a failed batch or a cancelled run released every key and button it
//! pressed. Generic over the record's event type (the daemon's fake
//! driver's `Event` in the api and loop tiers): testkit sits below the
//! daemon and cannot name it, so the caller says which events press or
//! release what.

/// A key (by keysym) or a button going down (`true`) or up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stroke {
    Key(u32, bool),
    Button(u8, bool),
}

/// The press events of `events` not followed by their release, in order.
/// A release undoes the latest press of the same key or button; `stroke`
/// tells which events are presses or releases (`None`: neither).
pub fn still_held<E: Clone>(events: &[E], stroke: impl Fn(&E) -> Option<Stroke>) -> Vec<E> {
    let mut held: Vec<(Stroke, E)> = Vec::new();
    for e in events {
        match stroke(e) {
            Some(s @ (Stroke::Key(_, true) | Stroke::Button(_, true))) => {
                held.push((s, e.clone()));
            }
            Some(Stroke::Key(k, false)) => release(&mut held, Stroke::Key(k, true)),
            Some(Stroke::Button(b, false)) => release(&mut held, Stroke::Button(b, true)),
            None => {}
        }
    }
    held.into_iter().map(|(_, e)| e).collect()
}

fn release<E>(held: &mut Vec<(Stroke, E)>, press: Stroke) {
    if let Some(i) = held.iter().rposition(|(s, _)| *s == press) {
        held.remove(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    enum Ev {
        Key(u32, bool),
        Button(u8, bool),
        Motion,
    }

    fn stroke(e: &Ev) -> Option<Stroke> {
        match *e {
            Ev::Key(k, d) => Some(Stroke::Key(k, d)),
            Ev::Button(b, d) => Some(Stroke::Button(b, d)),
            Ev::Motion => None,
        }
    }

    #[test]
    fn releases_undo_the_latest_press_of_the_same_key_or_button() {
        let events = [
            Ev::Key(1, true),
            Ev::Button(1, true),
            Ev::Motion,
            Ev::Key(1, true),
            Ev::Key(1, false),
            Ev::Button(1, false),
            Ev::Key(2, true),
            // A release of what is not held changes nothing.
            Ev::Button(3, false),
        ];
        assert_eq!(
            still_held(&events, stroke),
            vec![Ev::Key(1, true), Ev::Key(2, true)]
        );
        assert!(still_held(&events[..0], stroke).is_empty());
        // Key 1 and button 1 are different things.
        assert_eq!(
            still_held(&[Ev::Key(1, true), Ev::Button(1, false)], stroke),
            vec![Ev::Key(1, true)]
        );
    }
}
