//! [`Control`]: what hooks ask the agent to do besides changing data.

use reins_message::Msg;

/// Requests a hook makes of the run: stop, go back to reasoning, or reject a tool call.
///
/// Across a chain, each hook gets a fresh `Control` and the chain merges them: a stop
/// is sticky (no hook can undo it), `goto_reasoning` messages accumulate in chain order,
/// and the first rejection wins.
///
/// ```
/// use reins_hook::Control;
/// use reins_message::Msg;
///
/// let mut c = Control::default();
/// c.reject("not on Fridays");
/// c.reject("ignored: the first rejection wins");
/// c.goto_reasoning(vec![Msg::user("try a smaller file")]);
/// assert_eq!(c.rejection(), Some("not on Fridays"));
/// assert_eq!(c.goto().map(<[Msg]>::len), Some(1));
/// assert!(!c.is_stopped());
/// ```
#[derive(Default, Debug, Clone, PartialEq)]
pub struct Control {
    stop: bool,
    goto: Option<Vec<Msg>>,
    rejection: Option<String>,
}

impl Control {
    /// Pauses the run at this point (after reasoning: before tools run; after acting:
    /// once the results are stored).
    pub fn stop_agent(&mut self) {
        self.stop = true;
    }

    /// Calls the model again with `msgs` appended (after reasoning), instead of
    /// running the tools. May be called more than once; messages accumulate.
    pub fn goto_reasoning(&mut self, msgs: Vec<Msg>) {
        self.goto.get_or_insert_with(Vec::new).extend(msgs);
    }

    /// Refuses the tool call (on `PreActing`); the model is told `note`. Only the first
    /// rejection counts.
    pub fn reject(&mut self, note: impl Into<String>) {
        if self.rejection.is_none() {
            self.rejection = Some(note.into());
        }
    }

    /// Whether a hook asked to stop.
    pub fn is_stopped(&self) -> bool {
        self.stop
    }

    /// The messages to reason with again, if a hook asked for it.
    pub fn goto(&self) -> Option<&[Msg]> {
        self.goto.as_deref()
    }

    /// The note of the first rejection, if a hook rejected the call.
    pub fn rejection(&self) -> Option<&str> {
        self.rejection.as_deref()
    }

    /// Whether no hook asked for anything.
    pub fn is_empty(&self) -> bool {
        !self.stop && self.goto.is_none() && self.rejection.is_none()
    }

    /// Folds a later hook's requests into these: stop stays stopped, goto messages are
    /// appended, an earlier rejection is kept.
    pub fn merge(&mut self, later: Control) {
        self.stop |= later.stop;
        if let Some(msgs) = later.goto {
            self.goto_reasoning(msgs);
        }
        if let Some(note) = later.rejection {
            self.reject(note);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_semantics() {
        let mut acc = Control::default();
        assert!(acc.is_empty());
        let mut a = Control::default();
        a.stop_agent();
        a.goto_reasoning(vec![Msg::user("one")]);
        a.reject("first");
        let mut b = Control::default();
        b.goto_reasoning(vec![Msg::user("two"), Msg::user("three")]);
        b.reject("second");
        acc.merge(a);
        acc.merge(b);
        acc.merge(Control::default());
        assert!(acc.is_stopped());
        let texts: Vec<String> = acc.goto().unwrap().iter().map(Msg::text).collect();
        assert_eq!(texts, ["one", "two", "three"]);
        assert_eq!(acc.rejection(), Some("first"));

        let mut empty_goto = Control::default();
        empty_goto.goto_reasoning(Vec::new());
        assert_eq!(empty_goto.goto(), Some(&[][..]));
    }
}
