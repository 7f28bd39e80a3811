//! Interrupts of one running turn (seed: InjectInterruptText "优先 / 取消当前请求").
//!
//! Each running turn has its own [`TurnInterrupts`], registered under its
//! conversation while it runs, so an interrupt reaches only the turn of the
//! conversation it addresses. An interrupt cancels the LLM request in flight (if any);
//! the turn then asks again with the interrupt's text added as a system message. An
//! interrupt that arrives between LLM requests is added before the next one.

use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

/// Interrupts waiting to cut into one running turn.
#[derive(Debug, Default)]
pub struct TurnInterrupts {
    inner: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// `(source, text)` not yet added to the turn.
    pending: Vec<(String, String)>,
    /// The LLM request in flight, if any.
    in_flight: Option<CancellationToken>,
}

impl TurnInterrupts {
    /// Hands `(source, text)` to the turn and cancels its LLM request in flight.
    pub fn interrupt(&self, source: &str, text: &str) {
        let mut s = self.inner.lock().unwrap();
        s.pending.push((source.into(), text.into()));
        if let Some(token) = &s.in_flight {
            token.cancel();
        }
    }

    /// Starts an LLM request: the token an interrupt cancels. A request that
    /// starts with an interrupt already pending is cancelled at once.
    pub fn begin(&self) -> CancellationToken {
        let token = CancellationToken::new();
        let mut s = self.inner.lock().unwrap();
        if !s.pending.is_empty() {
            token.cancel();
        }
        s.in_flight = Some(token.clone());
        token
    }

    /// The LLM request ended.
    pub fn end(&self) {
        self.inner.lock().unwrap().in_flight = None;
    }

    /// Takes the interrupts not yet added to the turn.
    pub fn take(&self) -> Vec<(String, String)> {
        std::mem::take(&mut self.inner.lock().unwrap().pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupt_cancels_the_request_in_flight_and_waits_to_be_taken() {
        let t = TurnInterrupts::default();
        let token = t.begin();
        t.interrupt("cron", "STOP");
        assert!(token.is_cancelled());
        t.end();
        // Pending when the next request starts: it is cancelled at once.
        assert!(t.begin().is_cancelled());
        assert_eq!(t.take(), [("cron".to_string(), "STOP".to_string())]);
        assert!(!t.begin().is_cancelled());
    }
}
