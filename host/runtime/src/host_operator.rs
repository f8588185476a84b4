//! What the host's own operators (the [window](crate::window) and
//! [join](crate::join) operators) share: the subtask's keyed state, the
//! event-time timers as `(time, key)`, the watermark, the output being
//! built, and the errors they fail with. Each operator owns one
//! [`HostOperatorCore`] and decides what its timers mean.

use std::collections::BTreeSet;

use crate::record::{Batch, Emitted, SideOutput};
use crate::state::{KeyedStateBackend, StateError};
use crate::wasm::{FailureKind, OperatorError};

/// See the [module docs](self).
pub(crate) struct HostOperatorCore {
    /// The operator's uid, for errors.
    pub(crate) operator: String,
    state: Option<Box<dyn KeyedStateBackend>>,
    /// `(time, key)`, in firing order.
    pub(crate) timers: BTreeSet<(i64, Vec<u8>)>,
    /// The last watermark seen (`i64::MIN`: none).
    pub(crate) watermark: i64,
    /// What the current call emits.
    pub(crate) out: Emitted,
}

impl std::fmt::Debug for HostOperatorCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostOperatorCore")
            .field("operator", &self.operator)
            .field("timers", &self.timers.len())
            .field("watermark", &self.watermark)
            .finish_non_exhaustive()
    }
}

impl HostOperatorCore {
    pub(crate) fn new(operator: &str) -> HostOperatorCore {
        HostOperatorCore {
            operator: operator.to_owned(),
            state: None,
            timers: BTreeSet::new(),
            watermark: i64::MIN,
            out: Emitted::empty(),
        }
    }

    pub(crate) fn attach(&mut self, backend: Box<dyn KeyedStateBackend>) {
        self.state = Some(backend);
    }

    /// The keyed state's backend and about how many bytes it takes.
    pub(crate) fn state_size(&self) -> Option<crate::taskmanager::StateSize> {
        let state = self.state.as_ref()?;
        Some((state.kind(), state.size_bytes()))
    }

    pub(crate) fn backend(&mut self) -> Result<&mut Box<dyn KeyedStateBackend>, OperatorError> {
        if self.state.is_none() {
            return Err(self.fail(FailureKind::Host, "operator without state".into()));
        }
        Ok(self.state.as_mut().expect("checked above"))
    }

    pub(crate) fn fail(&self, kind: FailureKind, message: String) -> OperatorError {
        OperatorError::new(&self.operator, kind, message)
    }

    /// A state backend failure.
    pub(crate) fn host(&self, e: StateError) -> OperatorError {
        self.fail(FailureKind::Host, format!("state: {e}"))
    }

    /// State that does not decode.
    pub(crate) fn corrupt(&self, key: &[u8]) -> OperatorError {
        self.fail(
            FailureKind::Host,
            format!("corrupt state for key {:?}", String::from_utf8_lossy(key)),
        )
    }

    /// Moves the watermark to `watermark`; false if it is not newer.
    pub(crate) fn advance_to(&mut self, watermark: i64) -> bool {
        if watermark <= self.watermark {
            return false;
        }
        self.watermark = watermark;
        true
    }

    /// Takes the first timer at or before the watermark.
    pub(crate) fn pop_due(&mut self) -> Option<(i64, Vec<u8>)> {
        match self.timers.first() {
            Some((time, _)) if *time <= self.watermark => self.timers.pop_first(),
            _ => None,
        }
    }

    /// What was emitted since the last take.
    pub(crate) fn take_out(&mut self) -> Emitted {
        std::mem::replace(&mut self.out, Emitted::empty())
    }

    /// Adds a record to the side output `tag`.
    pub(crate) fn side(&mut self, tag: &str, key: &[u8], value: &[u8], ts: i64) {
        let side = match self.out.side.iter().position(|s| s.tag == tag) {
            Some(i) => &mut self.out.side[i],
            None => {
                self.out.side.push(SideOutput {
                    tag: tag.to_owned(),
                    records: Batch::new(),
                });
                self.out.side.last_mut().expect("just pushed")
            }
        };
        side.records.push(Some(key), value, ts);
    }

    /// Registered timers, in firing order (for checkpoints).
    pub(crate) fn timer_list(&self) -> Vec<(i64, Vec<u8>)> {
        self.timers.iter().cloned().collect()
    }

    /// Restores timers from a checkpoint.
    pub(crate) fn restore_timers(&mut self, timers: Vec<(i64, Vec<u8>)>) {
        self.timers = timers.into_iter().collect();
    }

    /// Writes buffered state updates to the backend.
    pub(crate) fn flush(&mut self) -> Result<(), OperatorError> {
        let flushed = self.backend()?.flush();
        flushed.map_err(|e| self.host(e))
    }

    /// The synchronous part of a checkpoint: flush, then a local snapshot
    /// into `dir`.
    pub(crate) fn snapshot(&mut self, dir: &std::path::Path) -> Result<bool, OperatorError> {
        let backend = self.backend()?;
        let taken = backend.flush().and_then(|()| backend.snapshot_local(dir));
        taken.map_err(|e| self.fail(FailureKind::Host, format!("checkpoint: {e}")))?;
        Ok(true)
    }
}
