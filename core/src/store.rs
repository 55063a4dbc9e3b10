//! The reservation records of one product, with the idempotency index over
//! them.
//!
//! Memory per live hold is the budget that matters most (a hot product may
//! hold a million units at once), so the layout is chosen for it:
//! - Unconfirmed reservations live in a deque indexed by `id - base`. Ids are
//!   handed out in sequence and age out roughly in sequence, so the deque is
//!   dense and needs no hash table.
//! - A confirmed reservation moves to a hash map, because it is kept for the
//!   life of the product and would otherwise pin the deque's front. It stays
//!   there if it is voided.
//! - The idempotency index stores only the reservation id. The key it is
//!   looked up by, `(buyer slot, idem_key)`, is read back from the record, so
//!   no key string is stored twice.
//! - A record names its buyer by a 4-byte slot in `Buyers`, and a confirmed
//!   record's payment data lives beside it in the confirmed table only.

use std::collections::VecDeque;
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};

use crate::buyers::BuyerSlot;
use crate::outcome::ReservationId;

/// The life of a reservation: `Held -> Confirmed | Cancelled | Expired`
/// (I4), and then only `Confirmed -> Voided`, an admin's refund.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HoldState {
    Held,
    Confirmed,
    Cancelled,
    Expired,
    Voided,
}

impl HoldState {
    pub const ALL: [HoldState; 5] = [
        HoldState::Held,
        HoldState::Confirmed,
        HoldState::Cancelled,
        HoldState::Expired,
        HoldState::Voided,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HoldState::Held => "held",
            HoldState::Confirmed => "confirmed",
            HoldState::Cancelled => "cancelled",
            HoldState::Expired => "expired",
            HoldState::Voided => "voided",
        }
    }

    pub fn parse(s: &str) -> Option<HoldState> {
        HoldState::ALL.into_iter().find(|h| h.as_str() == s)
    }

    /// Whether a record in this state was paid, and so carries payment data
    /// and lives in the confirmed table.
    pub fn paid(self) -> bool {
        matches!(self, HoldState::Confirmed | HoldState::Voided)
    }
}

/// What a void adds to a confirmed reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Void {
    pub voided_at_ms: u64,
    /// The outbox entry that forwards the void to the origin.
    pub outbox_seq: u64,
}

/// What a confirmation adds to a reservation. Kept only in the confirmed
/// table, because most records are never confirmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Paid {
    pub payment_ref: Box<str>,
    pub confirmed_at_ms: u64,
    pub outbox_seq: u64,
    /// Set once the order is voided.
    pub void: Option<Void>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub idem_key: Box<str>,
    pub expires_at_ms: u64,
    pub buyer: BuyerSlot,
    pub quantity: u32,
    pub state: HoldState,
}

/// A confirmed record and its payment.
struct Sold {
    r: Reservation,
    paid: Paid,
}

pub(crate) struct Store {
    /// The id of `recent[0]`.
    base: ReservationId,
    /// Unconfirmed records by `id - base`. `None` is a record that was purged
    /// or moved to `confirmed`. The front is never `None`.
    recent: VecDeque<Option<Reservation>>,
    confirmed: HashMap<ReservationId, Sold>,
    idem: HashTable<ReservationId>,
    hasher: DefaultHashBuilder,
}

fn find<'a>(
    base: ReservationId,
    recent: &'a VecDeque<Option<Reservation>>,
    confirmed: &'a HashMap<ReservationId, Sold>,
    id: ReservationId,
) -> Option<&'a Reservation> {
    let in_recent = id
        .checked_sub(base)
        .and_then(|i| usize::try_from(i).ok())
        .and_then(|i| recent.get(i))
        .and_then(Option::as_ref);
    in_recent.or_else(|| confirmed.get(&id).map(|s| &s.r))
}

impl Store {
    /// An empty store whose next id is `next_id`.
    pub fn new(next_id: ReservationId) -> Store {
        Store {
            base: next_id,
            recent: VecDeque::new(),
            confirmed: HashMap::new(),
            idem: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }

    fn idem_hash(hasher: &DefaultHashBuilder, buyer: BuyerSlot, key: &str) -> u64 {
        hasher.hash_one((buyer, key))
    }

    pub fn get(&self, id: ReservationId) -> Option<&Reservation> {
        find(self.base, &self.recent, &self.confirmed, id)
    }

    pub fn get_mut(&mut self, id: ReservationId) -> Option<&mut Reservation> {
        let in_recent = id
            .checked_sub(self.base)
            .and_then(|i| usize::try_from(i).ok())
            .filter(|&i| i < self.recent.len());
        match in_recent {
            Some(i) => self.recent[i].as_mut(),
            None => self.confirmed.get_mut(&id).map(|s| &mut s.r),
        }
    }

    /// The payment of a confirmed (or voided) record.
    pub fn paid(&self, id: ReservationId) -> Option<&Paid> {
        self.confirmed.get(&id).map(|s| &s.paid)
    }

    /// Records a confirmed record's void.
    pub fn void(&mut self, id: ReservationId, void: Void) {
        let sold = self
            .confirmed
            .get_mut(&id)
            .expect("a voided record was confirmed");
        assert_eq!(
            sold.r.state,
            HoldState::Confirmed,
            "only a confirmed order is voided"
        );
        sold.r.state = HoldState::Voided;
        sold.paid.void = Some(void);
    }

    /// The reservation this buyer made with this idempotency key, if it is
    /// still remembered.
    pub fn find_idem(&self, buyer: BuyerSlot, key: &str) -> Option<ReservationId> {
        let hash = Self::idem_hash(&self.hasher, buyer, key);
        let (base, recent, confirmed) = (self.base, &self.recent, &self.confirmed);
        self.idem
            .find(hash, |&id| {
                find(base, recent, confirmed, id)
                    .is_some_and(|r| r.buyer == buyer && &*r.idem_key == key)
            })
            .copied()
    }

    /// Adds a record under a new id, which must be above every id before it.
    /// `paid` is given exactly for a confirmed record (on restore). The
    /// caller has checked with `find_idem` that the key is new.
    pub fn insert(&mut self, id: ReservationId, r: Reservation, paid: Option<Paid>) {
        let hash = Self::idem_hash(&self.hasher, r.buyer, &r.idem_key);
        assert_eq!(paid.is_some(), r.state.paid());
        if let Some(paid) = paid {
            let fresh = self.confirmed.insert(id, Sold { r, paid }).is_none();
            assert!(fresh, "reservation {id} inserted twice");
        } else {
            if self.recent.is_empty() {
                self.base = id;
            }
            let next = self.base + self.recent.len() as u64;
            assert!(id >= next, "reservation ids must rise: {id} after {next}");
            // Gaps are records that aged out before a restore; they stay
            // `None` so that ids keep indexing the deque.
            for _ in next..id {
                self.recent.push_back(None);
            }
            self.recent.push_back(Some(r));
        }
        let (base, recent, confirmed, hasher) =
            (self.base, &self.recent, &self.confirmed, &self.hasher);
        self.idem.insert_unique(hash, id, |&other| {
            let r = find(base, recent, confirmed, other).expect("indexed record exists");
            Self::idem_hash(hasher, r.buyer, &r.idem_key)
        });
    }

    /// Moves a record that just became confirmed out of the deque, so that it
    /// does not pin the deque's front for the life of the product.
    pub fn move_to_confirmed(&mut self, id: ReservationId, paid: Paid) {
        let i = usize::try_from(id - self.base).expect("id in deque");
        let r = self.recent[i].take().expect("record in deque");
        debug_assert_eq!(r.state, HoldState::Confirmed);
        self.confirmed.insert(id, Sold { r, paid });
        self.trim_front();
    }

    /// Forgets a record and its idempotency key.
    pub fn remove(&mut self, id: ReservationId) -> Reservation {
        let hash = {
            let r = self.get(id).expect("removed record exists");
            Self::idem_hash(&self.hasher, r.buyer, &r.idem_key)
        };
        let entry = self
            .idem
            .find_entry(hash, |&other| other == id)
            .expect("every record is indexed");
        entry.remove();
        let r = match id.checked_sub(self.base).map(|i| i as usize) {
            Some(i) if i < self.recent.len() && self.recent[i].is_some() => {
                self.recent[i].take().expect("checked")
            }
            _ => self.confirmed.remove(&id).expect("record exists").r,
        };
        self.trim_front();
        r
    }

    fn trim_front(&mut self) {
        while let Some(None) = self.recent.front() {
            self.recent.pop_front();
            self.base += 1;
        }
    }

    /// Every record, in id order. For audits and snapshots, not hot paths.
    pub fn iter(&self) -> impl Iterator<Item = (ReservationId, &Reservation)> {
        let mut all: Vec<(ReservationId, &Reservation)> = self
            .recent
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|r| (self.base + i as u64, r)))
            .chain(self.confirmed.iter().map(|(&id, s)| (id, &s.r)))
            .collect();
        all.sort_unstable_by_key(|&(id, _)| id);
        all.into_iter()
    }

    /// Checks the index against the records. O(n); for audits.
    pub fn audit(&self) -> Result<(), String> {
        if let Some(None) = self.recent.front() {
            return Err("store: deque front is empty".into());
        }
        let records = self.recent.iter().flatten().count() + self.confirmed.len();
        if records != self.idem.len() {
            return Err(format!(
                "store: {records} records but {} idempotency entries",
                self.idem.len()
            ));
        }
        for (id, r) in self.iter() {
            if self.find_idem(r.buyer, &r.idem_key) != Some(id) {
                return Err(format!("store: record {id} is not found by its key"));
            }
            let in_confirmed = self.confirmed.contains_key(&id);
            if in_confirmed != r.state.paid() {
                return Err(format!("store: record {id} is in the wrong table"));
            }
        }
        Ok(())
    }
}
