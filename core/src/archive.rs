//! Paid records kept in storage only.
//!
//! A confirmed (or voided) reservation is final: nothing about it changes
//! again except one void. Kept in memory for the life of the product, such
//! records were the one part of the gate's memory that grew without a
//! bound (one per order ever sold). An archived gate (`Gate::set_archived`)
//! therefore forgets a paid record once `poll_changes` has handed its row
//! to the shell, and reads it back from storage, synchronously, when a
//! replay, a confirm, a cancel, a buyer's read or a void names it.
//!
//! The core stays free of I/O: storage is handed in as a read-only view at
//! each call that may need it, as the time is. In memory stay the live
//! holds, the tombstones inside their idempotency window, the indexes over
//! them, the buyers those records name, and a fixed-size filter of the
//! buyers who paid (`Gate::paid_buyers`): a buyer with only paid orders
//! has nothing in memory, and is read back from storage when the filter
//! says the buyer may have some.

use crate::outcome::ReservationId;
use crate::rows::ReservationRow;

/// A read-only view of the paid reservations in storage.
///
/// Implementations answer from the rows the shell has written, including
/// those written earlier in the same transaction. A paid record that is
/// still in memory (its row not yet taken) shadows storage: the gate looks
/// in memory first.
pub trait Archive {
    /// The paid record `id`, if storage holds one.
    fn paid(&self, id: ReservationId) -> Option<ReservationRow>;
    /// The paid record `buyer` made under `idem_key`, if storage holds one.
    fn paid_by_key(&self, buyer: &str, idem_key: &str) -> Option<ReservationRow>;
    /// Every paid record of `buyer` (a handful: at most `per_buyer_max`
    /// units, plus the buyer's voided orders).
    fn paid_of_buyer(&self, buyer: &str) -> Vec<ReservationRow>;
    /// The most units any buyer's confirmed records in storage hold: for
    /// an admin lowering `per_buyer_max`.
    fn paid_units_max(&self) -> u32;
    /// Each buyer with paid records, once: for rebuilding the filter of
    /// paying buyers after a restock. O(n).
    fn each_paid_buyer(&self, each: &mut dyn FnMut(&str));
    /// Every paid record, for audits only: O(n).
    fn all_paid(&self) -> Vec<ReservationRow>;
}

/// The archive of a gate that keeps every record in memory: it is never
/// archived, so storage holds nothing it does not.
pub struct NoArchive;

impl Archive for NoArchive {
    fn paid(&self, _: ReservationId) -> Option<ReservationRow> {
        None
    }
    fn paid_by_key(&self, _: &str, _: &str) -> Option<ReservationRow> {
        None
    }
    fn paid_of_buyer(&self, _: &str) -> Vec<ReservationRow> {
        Vec::new()
    }
    fn paid_units_max(&self) -> u32 {
        0
    }
    fn each_paid_buyer(&self, _: &mut dyn FnMut(&str)) {}
    fn all_paid(&self) -> Vec<ReservationRow> {
        Vec::new()
    }
}

/// An archive over rows held in a map, as the simulators keep storage.
impl Archive for std::collections::BTreeMap<crate::rows::RowKey, crate::rows::Row> {
    fn paid(&self, id: ReservationId) -> Option<ReservationRow> {
        match self.get(&crate::rows::RowKey::Reservation(id)) {
            Some(crate::rows::Row::Reservation(r)) if r.state.paid() => Some(r.clone()),
            _ => None,
        }
    }
    fn paid_by_key(&self, buyer: &str, idem_key: &str) -> Option<ReservationRow> {
        self.all_paid()
            .into_iter()
            .find(|r| r.buyer == buyer && r.idem_key == idem_key)
    }
    fn paid_of_buyer(&self, buyer: &str) -> Vec<ReservationRow> {
        self.all_paid()
            .into_iter()
            .filter(|r| r.buyer == buyer)
            .collect()
    }
    fn paid_units_max(&self) -> u32 {
        let mut units = std::collections::BTreeMap::<String, u32>::new();
        for r in self.all_paid() {
            if r.state == crate::store::HoldState::Confirmed {
                *units.entry(r.buyer).or_default() += r.quantity;
            }
        }
        units.into_values().max().unwrap_or(0)
    }
    fn each_paid_buyer(&self, each: &mut dyn FnMut(&str)) {
        let buyers: std::collections::BTreeSet<String> =
            self.all_paid().into_iter().map(|r| r.buyer).collect();
        for buyer in &buyers {
            each(buyer);
        }
    }
    fn all_paid(&self) -> Vec<ReservationRow> {
        self.values()
            .filter_map(|row| match row {
                crate::rows::Row::Reservation(r) if r.state.paid() => Some(r.clone()),
                _ => None,
            })
            .collect()
    }
}
