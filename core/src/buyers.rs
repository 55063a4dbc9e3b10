//! The buyers a product knows: each buyer id stored once, with the units the
//! buyer holds or bought.
//!
//! Reservations refer to a buyer by a 4-byte slot instead of carrying the id.
//! A slot lives while any reservation record in memory refers to it
//! (`refs`), which is longer than the buyer has units: a tombstone still
//! needs its buyer for idempotent replay and for the ownership check.
//!
//! A buyer's paid records may live in storage only (`archive.rs`). While
//! the buyer has a slot, it counts their units (against `per_buyer_max`)
//! and how many there are (`archived`: only then are the buyer's keys
//! looked up in storage); the gate loads both from storage when it makes
//! the slot (`adopt`). A slot whose last record in memory goes is freed
//! even if the buyer has paid records: `away` counts those buyers, so that
//! memory holds nothing per buyer who only has paid orders.

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

/// A buyer's slot in the table.
pub(crate) type BuyerSlot = u32;

struct Entry {
    id: Box<str>,
    /// Units held plus confirmed.
    units: u32,
    /// Reservation records in memory that refer to this slot.
    refs: u32,
    /// Paid records of this buyer that live in storage only.
    archived: u32,
}

#[derive(Default)]
pub(crate) struct Buyers {
    slots: Vec<Option<Entry>>,
    free: Vec<BuyerSlot>,
    index: HashTable<BuyerSlot>,
    hasher: DefaultHashBuilder,
    /// Buyers with a slot and at least one unit.
    with_units: u64,
    /// Buyers with no slot whose paid records in storage hold units.
    away: u64,
}

impl Buyers {
    fn entry(&self, slot: BuyerSlot) -> &Entry {
        self.slots[slot as usize].as_ref().expect("live buyer slot")
    }

    fn entry_mut(&mut self, slot: BuyerSlot) -> &mut Entry {
        self.slots[slot as usize].as_mut().expect("live buyer slot")
    }

    pub fn find(&self, id: &str) -> Option<BuyerSlot> {
        let hash = self.hasher.hash_one(id);
        let slots = &self.slots;
        self.index
            .find(hash, |&s| {
                slots[s as usize].as_ref().is_some_and(|e| &*e.id == id)
            })
            .copied()
    }

    pub fn id(&self, slot: BuyerSlot) -> &str {
        &self.entry(slot).id
    }

    /// Every buyer who holds or bought at least one unit.
    pub fn ids_with_units(&self) -> impl Iterator<Item = &str> + Clone {
        self.slots
            .iter()
            .flatten()
            .filter(|e| e.units > 0)
            .map(|e| &*e.id)
    }

    pub fn units(&self, slot: BuyerSlot) -> u32 {
        self.entry(slot).units
    }

    /// Takes a reference to the buyer's slot for a new record, making the
    /// slot if the buyer is new. `known` is the result of `find(id)` when
    /// the caller already looked, to save a second lookup.
    pub fn acquire(&mut self, id: &str, known: Option<Option<BuyerSlot>>) -> BuyerSlot {
        if let Some(slot) = known.unwrap_or_else(|| self.find(id)) {
            self.entry_mut(slot).refs += 1;
            return slot;
        }
        let entry = Entry {
            id: id.into(),
            units: 0,
            refs: 1,
            archived: 0,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(entry);
                slot
            }
            None => {
                let slot =
                    BuyerSlot::try_from(self.slots.len()).expect("buyers bounded by records");
                self.slots.push(Some(entry));
                slot
            }
        };
        let hash = self.hasher.hash_one(id);
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.index.insert_unique(hash, slot, |&s| {
            hasher.hash_one(&*slots[s as usize].as_ref().expect("indexed").id)
        });
        slot
    }

    /// Drops a record's reference; the slot is freed with its last one.
    pub fn release(&mut self, slot: BuyerSlot) {
        let e = self.entry_mut(slot);
        e.refs -= 1;
        self.free_if_unused(slot);
    }

    /// A paid record of this slot's buyer left memory for storage.
    pub fn archive(&mut self, slot: BuyerSlot) {
        let e = self.entry_mut(slot);
        e.refs -= 1;
        e.archived += 1;
        self.free_if_unused(slot);
    }

    /// A paid record of this slot's buyer came back from storage.
    pub fn unarchive(&mut self, slot: BuyerSlot) {
        let e = self.entry_mut(slot);
        e.archived -= 1;
        e.refs += 1;
    }

    /// A slot just made for a buyer who has paid records in storage: their
    /// units and how many records, as storage holds them.
    pub fn adopt(&mut self, slot: BuyerSlot, units: u32, archived: u32) {
        if units > 0 {
            self.away -= 1;
            self.restock(slot, units);
        }
        self.entry_mut(slot).archived += archived;
    }

    /// On restore, a paid record that stays in storage, of a buyer with a
    /// slot (a record in memory).
    pub fn restore_archived(&mut self, slot: BuyerSlot) {
        self.entry_mut(slot).archived += 1;
    }

    /// On restore, a buyer with no record in memory whose paid records hold
    /// units.
    pub fn restore_away(&mut self) {
        self.away += 1;
    }

    /// Paid records of the buyer in storage only.
    pub fn archived(&self, slot: BuyerSlot) -> u32 {
        self.entry(slot).archived
    }

    /// Buyers with no slot whose paid records hold units.
    pub fn away(&self) -> u64 {
        self.away
    }

    fn free_if_unused(&mut self, slot: BuyerSlot) {
        let e = self.entry(slot);
        if e.refs > 0 {
            return;
        }
        // The buyer's paid units stay in storage, and are read back with
        // the buyer's next record.
        if e.units > 0 {
            debug_assert!(e.archived > 0, "units with no record left");
            self.with_units -= 1;
            self.away += 1;
        }
        let hash = self.hasher.hash_one(&*self.entry(slot).id);
        self.index
            .find_entry(hash, |&s| s == slot)
            .expect("live slots are indexed")
            .remove();
        self.slots[slot as usize] = None;
        self.free.push(slot);
    }

    pub fn restock(&mut self, slot: BuyerSlot, units: u32) {
        if units == 0 {
            return;
        }
        let e = self.entry_mut(slot);
        let was_empty = e.units == 0;
        e.units += units;
        if was_empty {
            self.with_units += 1;
        }
    }

    pub fn remove_units(&mut self, slot: BuyerSlot, units: u32) {
        let e = self.entry_mut(slot);
        e.units -= units;
        if e.units == 0 {
            self.with_units -= 1;
        }
    }

    /// Buyers who hold or bought units, with a slot or not.
    pub fn with_units(&self) -> u64 {
        self.with_units + self.away
    }

    /// The most units any buyer has.
    pub fn units_max(&self) -> u32 {
        self.slots
            .iter()
            .flatten()
            .map(|e| e.units)
            .max()
            .unwrap_or(0)
    }

    /// `(slot, id, units, refs, archived)` of every live slot. For audits.
    pub fn iter(&self) -> impl Iterator<Item = (BuyerSlot, &str, u32, u32, u32)> {
        self.slots.iter().enumerate().filter_map(|(i, e)| {
            e.as_ref()
                .map(|e| (i as BuyerSlot, &*e.id, e.units, e.refs, e.archived))
        })
    }

    pub fn audit(&self) -> Result<(), String> {
        let live = self.slots.iter().flatten().count();
        if live != self.index.len() {
            return Err(format!(
                "buyers: {live} slots but {} indexed",
                self.index.len()
            ));
        }
        for (slot, id, _, refs, archived) in self.iter() {
            if self.find(id) != Some(slot) {
                return Err(format!("buyers: {id} is not found at its slot"));
            }
            let _ = archived;
            if refs == 0 {
                return Err(format!("buyers: {id} has a slot but no records in memory"));
            }
        }
        let with_units = self.iter().filter(|&(_, _, u, _, _)| u > 0).count() as u64;
        if with_units != self.with_units {
            return Err("buyers: count of buyers with units is wrong".into());
        }
        Ok(())
    }
}
