//! The backend-neutral connection manager: event channels, ids, events and the
//! bookkeeping that ties them together ("destroy waits until every reported
//! event is acked").

pub mod channel;
pub mod event;
pub mod id;
pub mod options;
pub mod registry;
mod slab;

pub use channel::{Channel, ChannelBox};
pub use event::{EventBox, Head, Pending, Slot};
pub use id::{IdBox, IdCore};

#[cfg(test)]
mod source_tests;
#[cfg(test)]
mod tests;
