//! Core behaviour the man pages promise, exercised without the C boundary.

use super::*;
use crate::sys::Errno;
use rdma_abi::cma::*;
use std::sync::mpsc;
use std::time::Duration;

pub(super) fn set_nonblock(fd: i32) {
    crate::sys::set_nonblock(fd, true).unwrap();
}

pub(super) use crate::sys::readable_now as readable;

fn chan() -> (*mut rdma_event_channel, std::sync::Arc<Channel>) {
    let c = ChannelBox::create().unwrap();
    (c, ChannelBox::lookup(c).unwrap())
}

/// Runs `call` in a thread: it must still be blocked 200 ms later, and must
/// return within 5 s once `release` ran (destroy and migrate wait for acks).
fn returns_only_after(what: &str, call: impl FnOnce() + Send + 'static, release: impl FnOnce()) {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        call();
        tx.send(()).unwrap();
    });
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "{what} returned with an event unacked");
    release();
    rx.recv_timeout(Duration::from_secs(5)).unwrap_or_else(|_| panic!("{what} did not return after the ack"));
    t.join().unwrap();
}

fn returns_only_after_ack(ev: *mut rdma_cm_event, what: &str, call: impl FnOnce() + Send + 'static) {
    returns_only_after(what, call, || EventBox::ack(ev).unwrap());
}

#[test]
fn destroy_waits_for_an_event_a_reader_took_but_has_not_given_out() {
    let (c, ch) = chan();
    let id = IdBox::create(c, std::ptr::null_mut(), RDMA_PS_TCP, None).unwrap();
    IdBox::write_user_event(id, RDMA_CM_EVENT_USER, 0, 1).unwrap();
    // rdma_get_cm_event took it off the queue and has not returned yet.
    let taken = ch.pop().unwrap();
    let idp = id as usize;
    returns_only_after(
        "destroy",
        move || IdBox::destroy(idp as *mut rdma_cm_id).unwrap(),
        || {
            let ev = EventBox::deliver(taken);
            // SAFETY: a live event we just delivered.
            assert_eq!(unsafe { (*ev).id }, id);
            EventBox::ack(ev).unwrap();
        },
    );
    ChannelBox::destroy(c).unwrap();
}

#[test]
fn user_event_round_trip_and_readiness() {
    let (c, ch) = chan();
    let id = IdBox::create(c, std::ptr::null_mut(), RDMA_PS_TCP, None).unwrap();
    assert!(!readable(ch.fd()));
    IdBox::write_user_event(id, RDMA_CM_EVENT_USER, -5, 0xdead_beef).unwrap();
    assert!(readable(ch.fd()));
    let ev = EventBox::deliver(ch.pop().unwrap());
    assert!(!readable(ch.fd()));
    // SAFETY: a live event we just delivered.
    let e = unsafe { &*ev };
    assert_eq!((e.id, e.event, e.status), (id, RDMA_CM_EVENT_USER, -5));
    // SAFETY: USER events carry `arg`.
    assert_eq!(unsafe { e.param.arg }, 0xdead_beef);
    assert!(e.listen_id.is_null());
    EventBox::ack(ev).unwrap();
    assert_eq!(EventBox::ack(ev), Err(Errno::EINVAL), "double ack is refused");
    assert_eq!(IdBox::write_user_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, 0), Err(Errno::EINVAL));
    IdBox::destroy(id).unwrap();
    ChannelBox::destroy(c).unwrap();
}

#[test]
fn nonblocking_channel_says_eagain() {
    let (c, ch) = chan();
    set_nonblock(ch.fd());
    assert_eq!(ch.pop().err(), Some(Errno::EAGAIN));
    ChannelBox::destroy(c).unwrap();
}

#[test]
fn bad_port_space_and_stale_handles() {
    let (c, _) = chan();
    assert_eq!(IdBox::create(c, std::ptr::null_mut(), 0x999, None).err(), Some(Errno::EINVAL));
    let id = IdBox::create(c, std::ptr::null_mut(), RDMA_PS_UDP, None).unwrap();
    // SAFETY: a live id.
    assert_eq!(unsafe { (*id).qp_type }, 4, "UDP port space means a UD QP");
    IdBox::destroy(id).unwrap();
    assert_eq!(IdBox::destroy(id), Err(Errno::EINVAL));
    assert_eq!(IdBox::lookup(std::ptr::dangling::<rdma_cm_id>()).err(), Some(Errno::EINVAL));
    ChannelBox::destroy(c).unwrap();
    assert_eq!(ChannelBox::destroy(c), Err(Errno::EINVAL));
}

#[test]
fn destroy_waits_for_ack_and_drops_unread_events() {
    let (c, ch) = chan();
    let id = IdBox::create(c, std::ptr::null_mut(), RDMA_PS_TCP, None).unwrap();
    IdBox::write_user_event(id, RDMA_CM_EVENT_USER, 0, 1).unwrap();
    IdBox::write_user_event(id, RDMA_CM_EVENT_USER, 0, 2).unwrap();
    let ev = EventBox::deliver(ch.pop().unwrap());
    let idp = id as usize;
    returns_only_after_ack(ev, "destroy", move || IdBox::destroy(idp as *mut rdma_cm_id).unwrap());
    set_nonblock(ch.fd());
    assert_eq!(ch.pop().err(), Some(Errno::EAGAIN), "the unread event went with the id");
    ChannelBox::destroy(c).unwrap();
}

#[test]
fn migrate_moves_unread_events_and_sync_mode() {
    let (a, cha) = chan();
    let (b, chb) = chan();
    let id = IdBox::create(a, std::ptr::null_mut(), RDMA_PS_TCP, None).unwrap();
    IdBox::write_user_event(id, RDMA_CM_EVENT_USER, 0, 7).unwrap();
    IdBox::migrate(id, b).unwrap();
    // SAFETY: a live id.
    assert_eq!(unsafe { (*id).channel }, b);
    set_nonblock(cha.fd());
    assert_eq!(cha.pop().err(), Some(Errno::EAGAIN));
    let ev = EventBox::deliver(chb.pop().unwrap());
    EventBox::ack(ev).unwrap();
    // To sync mode and back to a channel.
    IdBox::migrate(id, std::ptr::null_mut()).unwrap();
    assert_eq!(IdBox::migrate(id, std::ptr::null_mut()), Err(Errno::EINVAL), "already synchronous");
    IdBox::migrate(id, a).unwrap();
    IdBox::destroy(id).unwrap();
    ChannelBox::destroy(a).unwrap();
    ChannelBox::destroy(b).unwrap();
}

#[test]
fn sync_id_completion_keeps_event_and_maps_status() {
    let id = IdBox::create(std::ptr::null_mut(), std::ptr::null_mut(), RDMA_PS_TCP, None).unwrap();
    let core = IdBox::lookup(id).unwrap();
    assert!(core.is_sync());
    IdBox::write_user_event(id, RDMA_CM_EVENT_USER, 0, 1).unwrap();
    core.complete().unwrap();
    // SAFETY: a live id; complete() stored the event.
    let ev = unsafe { (*id).event };
    assert!(!ev.is_null());
    IdBox::write_user_event(id, RDMA_CM_EVENT_USER, -libc::ETIMEDOUT, 1).unwrap();
    assert_eq!(core.complete(), Err(Errno(libc::ETIMEDOUT)));
    let _ = ev;
    assert_eq!(core.outstanding(&core.state()), 1, "the previous event was acked by the next completion");
    // SAFETY: a live id holding the failed completion's event.
    assert_eq!(unsafe { (*(*id).event).status }, -libc::ETIMEDOUT);
    IdBox::destroy(id).unwrap();
}

#[test]
fn an_event_read_for_a_migrated_id_goes_to_its_new_channel() {
    let (a, cha) = chan();
    let (b, chb) = chan();
    let stay = IdBox::create(a, std::ptr::null_mut(), RDMA_PS_TCP, None).unwrap();
    let moved = IdBox::create(a, std::ptr::null_mut(), RDMA_PS_TCP, None).unwrap();
    IdBox::migrate(moved, b).unwrap();
    let (stay_core, moved_core) = (IdBox::lookup(stay).unwrap(), IdBox::lookup(moved).unwrap());
    // A reader of `a` got one event for each id from the backend.
    let mut slot = Some(Slot::new());
    let mine = stay_core.deliver_or_post(stay_core.head(RDMA_CM_EVENT_USER, 0, event::Param::arg(1)), &[], &cha, &mut slot);
    assert!(mine.is_some() && slot.is_none(), "an event for an id on the reader's channel is the reader's");
    let mut slot = Some(Slot::new());
    let theirs = moved_core.deliver_or_post(moved_core.head(RDMA_CM_EVENT_USER, 0, event::Param::arg(2)), &[], &cha, &mut slot);
    assert!(theirs.is_none() && slot.is_some(), "an event for an id that moved is not the reader's");
    assert!(readable(chb.fd()), "it waits on the id's new channel");
    let ev = EventBox::deliver(chb.pop().unwrap());
    // SAFETY: a live event we just delivered.
    assert_eq!(unsafe { ((*ev).id, (*ev).param.arg) }, (moved, 2));
    EventBox::ack(ev).unwrap();
    EventBox::ack(mine.unwrap()).unwrap();
    IdBox::destroy(stay).unwrap();
    IdBox::destroy(moved).unwrap();
    ChannelBox::destroy(a).unwrap();
    ChannelBox::destroy(b).unwrap();
}

#[test]
fn migrate_waits_until_delivered_events_are_acked() {
    let (a, cha) = chan();
    let (b, _) = chan();
    let id = IdBox::create(a, std::ptr::null_mut(), RDMA_PS_TCP, None).unwrap();
    IdBox::write_user_event(id, RDMA_CM_EVENT_USER, 0, 1).unwrap();
    let ev = EventBox::deliver(cha.pop().unwrap());
    let (idp, bp) = (id as usize, b as usize);
    returns_only_after_ack(ev, "migrate", move || {
        IdBox::migrate(idp as *mut rdma_cm_id, bp as *mut rdma_event_channel).unwrap()
    });
    // SAFETY: a live id.
    assert_eq!(unsafe { (*id).channel }, b);
    IdBox::destroy(id).unwrap();
    ChannelBox::destroy(a).unwrap();
    ChannelBox::destroy(b).unwrap();
}

#[test]
fn a_sync_event_the_application_acked_itself_is_not_acked_again() {
    let id = IdBox::create(std::ptr::null_mut(), std::ptr::null_mut(), RDMA_PS_TCP, None).unwrap();
    let core = IdBox::lookup(id).unwrap();
    IdBox::write_user_event(id, RDMA_CM_EVENT_USER, 0, 1).unwrap();
    core.complete().unwrap();
    // SAFETY: a live id; complete() stored the event.
    EventBox::ack(unsafe { (*id).event }).unwrap();
    IdBox::write_user_event(id, RDMA_CM_EVENT_USER, 0, 2).unwrap();
    core.complete().expect("the next synchronous step goes on");
    assert_eq!(core.outstanding(&core.state()), 1);
    IdBox::destroy(id).expect("destroy acks the stored event and frees the id");
    assert_eq!(IdBox::lookup(id).err(), Some(Errno::EINVAL));
}

/// rdma_create_id's backend step (`create_with`'s `init`) failing: the call
/// fails with its errno, the new id's reference to its channel is gone, and a
/// synchronous id's private channel is destroyed with it.
#[test]
fn create_with_failing_init_leaves_nothing_behind() {
    let (chp, ch) = chan();
    let before = std::sync::Arc::strong_count(&ch);
    let r = IdBox::create_with(chp, std::ptr::null_mut(), RDMA_PS_TCP, |core| {
        assert!(std::sync::Arc::strong_count(&ch) > before, "the id holds its channel");
        assert_eq!(core.ps(), RDMA_PS_TCP);
        Err(Errno::EIO)
    });
    assert_eq!(r.err(), Some(Errno::EIO));
    assert_eq!(std::sync::Arc::strong_count(&ch), before);

    let mut private = std::ptr::null_mut();
    let r = IdBox::create_with(std::ptr::null_mut(), std::ptr::null_mut(), RDMA_PS_UDP, |core| {
        private = core.with_public(|p| p.channel).unwrap();
        Err(Errno::ENOMEM)
    });
    assert_eq!(r.err(), Some(Errno::ENOMEM));
    assert!(!private.is_null());
    assert_eq!(ChannelBox::lookup(private).err(), Some(Errno::EINVAL), "the private channel went with the id");

    let ok = IdBox::create_with(chp, std::ptr::null_mut(), RDMA_PS_UDP, |_| Ok(())).unwrap();
    assert!(IdBox::lookup(ok).is_ok());
    IdBox::destroy(ok).unwrap();
    ChannelBox::destroy(chp).unwrap();
}

/// An event's uid names its id by address and generation: the id while it
/// lives with that generation (only the low 15 bits count), nothing for
/// another generation at the same address or once the id is destroyed.
#[test]
fn lookup_gen_finds_only_the_id_of_that_generation() {
    let (chp, _ch) = chan();
    let id = IdBox::create(chp, std::ptr::null_mut(), RDMA_PS_TCP, None).unwrap();
    let gen = IdBox::lookup(id).unwrap().gen();
    assert!(IdBox::lookup_gen(id, gen).is_some_and(|c| c.ptr().0 == id));
    assert!(IdBox::lookup_gen(id, gen ^ 0x8000).is_some(), "bit 15 is not part of the uid");
    assert!(IdBox::lookup_gen(id, gen ^ 1).is_none(), "a newer id at the same address");
    IdBox::destroy(id).unwrap();
    assert!(IdBox::lookup_gen(id, gen).is_none(), "a destroyed id");
    ChannelBox::destroy(chp).unwrap();
}
