//! Joinable jobs: [`Pool::spawn`](super::Pool::spawn) and its [`JoinHandle`].

use std::any::Any;
use std::fmt;
use std::sync::mpsc;

/// Why [`JoinHandle::join`] has no value.
#[non_exhaustive]
pub enum JoinError {
    /// The job panicked; this is the panic payload.
    Panicked(Box<dyn Any + Send + 'static>),
    /// The job never ran: [`Pool::shutdown_now`](super::Pool::shutdown_now)
    /// returned it and the caller dropped it.
    Cancelled,
}

impl JoinError {
    /// The panic message, when the payload is a string.
    pub fn panic_message(&self) -> Option<&str> {
        match self {
            JoinError::Panicked(p) => p
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| p.downcast_ref::<String>().map(String::as_str)),
            JoinError::Cancelled => None,
        }
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(_) => f
                .debug_tuple("Panicked")
                .field(&self.panic_message().unwrap_or("<non-string payload>"))
                .finish(),
            JoinError::Cancelled => f.write_str("Cancelled"),
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(_) => write!(
                f,
                "job panicked: {}",
                self.panic_message().unwrap_or("<non-string payload>")
            ),
            JoinError::Cancelled => f.write_str("job was cancelled before it ran"),
        }
    }
}

impl std::error::Error for JoinError {}

/// Owned permission to wait for a job started with
/// [`Pool::spawn`](super::Pool::spawn) and take its result. Dropping it
/// detaches the job (it still runs).
pub struct JoinHandle<T> {
    pub(crate) rx: mpsc::Receiver<std::thread::Result<T>>,
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle").finish_non_exhaustive()
    }
}

impl<T> JoinHandle<T> {
    /// Waits for the job and returns its value, or why there is none.
    pub fn join(self) -> Result<T, JoinError> {
        match self.rx.recv() {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(payload)) => Err(JoinError::Panicked(payload)),
            Err(mpsc::RecvError) => Err(JoinError::Cancelled),
        }
    }

    /// The result if the job has finished, else the handle back.
    pub fn try_join(self) -> Result<Result<T, JoinError>, Self> {
        match self.rx.try_recv() {
            Ok(Ok(v)) => Ok(Ok(v)),
            Ok(Err(payload)) => Ok(Err(JoinError::Panicked(payload))),
            Err(mpsc::TryRecvError::Disconnected) => Ok(Err(JoinError::Cancelled)),
            Err(mpsc::TryRecvError::Empty) => Err(self),
        }
    }
}
