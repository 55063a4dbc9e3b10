//! Which product ids exist, as the edge knows them: the ids the catalog
//! object has registered, read page by page and kept per isolate. A
//! request that names an id the view does not hold is answered
//! `unknown_product` here, without instantiating the product's object:
//! on the platform each new id is a billed object and, locally, a SQLite
//! file. The cost of a flood of made-up ids is then one catalog read per
//! isolate per `CATALOG_FRESH_MS`, whatever the number of ids.
//!
//! A product created through another isolate is seen here at the next
//! refresh, so for up to `CATALOG_FRESH_MS` after its creation this
//! isolate may still answer it unknown. A product created through this
//! isolate is known at once (`insert`).
//!
//! A miss while a read is in flight waits for that read (`Wait`), as a
//! snapshot's single flight does, and a read that failed lets the next miss
//! read again: an isolate that has just started (a deploy, a restart) with
//! a crowd on a real product must not tell the crowd it does not exist
//! while its first read is on its way. It did: after a `kill -9`, some
//! confirms of holds made before it were answered `unknown_product`.

use std::collections::HashSet;

use flashgate_wire::bounds;

use crate::limits::{CATALOG_FRESH_MS, CATALOG_READ_WAIT_MAX_MS, PRODUCTS_MAX};
use crate::protocol::CatalogPage;

/// What the view says of an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    Listed,
    /// Not registered, as of a read less than `CATALOG_FRESH_MS` old.
    Unlisted,
    /// Not known, and a read is in flight: wait `REFRESH_POLL_MS` on the
    /// request's own timer and ask again.
    Wait,
    /// Not known, and the view may read the catalog again: the caller
    /// does (`begin_refresh`, then `end_refresh` or `fail_refresh`) and
    /// asks once more.
    Refresh,
}

#[derive(Default)]
pub struct CatalogView {
    known: HashSet<String>,
    /// The catalog's cursor after the last page read.
    cursor: u64,
    /// When the last read that answered started: at most one starts per
    /// `CATALOG_FRESH_MS`, however many requests miss meanwhile.
    started_at_ms: Option<u64>,
    /// When the read in flight started; one that has not answered in
    /// `CATALOG_READ_WAIT_MAX_MS` (its request was dropped) is given up.
    reading_since_ms: Option<u64>,
}

impl CatalogView {
    pub fn lookup(&self, product_id: &str, now_ms: u64) -> Listing {
        if self.known.contains(product_id) {
            Listing::Listed
        } else if self
            .reading_since_ms
            .is_some_and(|t| now_ms.saturating_sub(t) < CATALOG_READ_WAIT_MAX_MS)
        {
            Listing::Wait
        } else if self
            .started_at_ms
            .is_some_and(|t| now_ms.saturating_sub(t) < CATALOG_FRESH_MS)
        {
            Listing::Unlisted
        } else {
            Listing::Refresh
        }
    }

    /// Starts a read; returns the cursor to read after.
    pub fn begin_refresh(&mut self, now_ms: u64) -> u64 {
        self.reading_since_ms = Some(now_ms);
        self.cursor
    }

    /// The read in flight brought nothing: the next miss reads again.
    pub fn fail_refresh(&mut self) {
        self.reading_since_ms = None;
    }

    /// Takes a page the catalog answered. Its ids are checked as any
    /// request's would be, and the view never holds more than the catalog
    /// may. A page with more behind it lets the next miss read again at
    /// once.
    pub fn end_refresh(&mut self, page: CatalogPage) {
        self.started_at_ms = self.reading_since_ms.take().or(self.started_at_ms);
        for id in page.ids {
            if self.known.len() >= PRODUCTS_MAX {
                break;
            }
            if bounds::valid_product_id(&id) {
                self.known.insert(id);
            }
        }
        self.cursor = self.cursor.max(page.next);
        if page.more {
            self.started_at_ms = None;
        }
    }

    /// An id this isolate has just registered.
    pub fn insert(&mut self, product_id: &str) {
        if self.known.len() < PRODUCTS_MAX {
            self.known.insert(product_id.to_string());
        }
    }

    pub fn len(&self) -> usize {
        self.known.len()
    }

    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(ids: &[&str], next: u64, more: bool) -> CatalogPage {
        CatalogPage {
            ids: ids.iter().map(|s| s.to_string()).collect(),
            next,
            more,
        }
    }

    #[test]
    fn a_miss_reads_the_catalog_at_most_once_a_period() {
        let mut v = CatalogView::default();
        assert_eq!(v.lookup("demo", 0), Listing::Refresh);
        assert_eq!(v.begin_refresh(0), 0);
        // Misses while the read is in flight wait for it; soon after, they
        // are unlisted.
        assert_eq!(v.lookup("demo", 10), Listing::Wait);
        assert_eq!(v.lookup("made-up-1", 10), Listing::Wait);
        v.end_refresh(page(&["demo"], 1, false));
        assert_eq!(v.lookup("demo", 20), Listing::Listed);
        for i in 0..10_000 {
            assert_eq!(
                v.lookup(&format!("made-up-{i}"), 20 + i / 20),
                Listing::Unlisted
            );
        }
        assert_eq!(v.lookup("made-up-x", CATALOG_FRESH_MS), Listing::Refresh);
        assert_eq!(
            v.begin_refresh(CATALOG_FRESH_MS),
            1,
            "reads after its cursor"
        );
    }

    /// A crowd on a real product, in an isolate that has just started: the
    /// read in flight is waited for, not answered unknown; a read that
    /// failed, or whose request was dropped, lets the next miss read again.
    #[test]
    fn a_crowd_waits_for_the_first_read_and_a_failed_read_is_not_an_answer() {
        let mut v = CatalogView::default();
        v.begin_refresh(0);
        for t in [1, 50, CATALOG_READ_WAIT_MAX_MS - 1] {
            assert_eq!(v.lookup("real", t), Listing::Wait);
        }
        v.fail_refresh();
        assert_eq!(
            v.lookup("real", 60),
            Listing::Refresh,
            "a failure is not a list"
        );
        v.begin_refresh(60);
        v.end_refresh(page(&["real"], 1, false));
        assert_eq!(v.lookup("real", 61), Listing::Listed);
        // A read whose request was dropped is given up after the wait.
        v.begin_refresh(5_000);
        assert_eq!(v.lookup("other", 5_001), Listing::Wait);
        assert_eq!(
            v.lookup("other", 5_000 + CATALOG_READ_WAIT_MAX_MS),
            Listing::Refresh
        );
    }

    #[test]
    fn a_page_with_more_lets_the_next_miss_read_on_and_bad_ids_are_dropped() {
        let mut v = CatalogView::default();
        v.begin_refresh(0);
        v.end_refresh(page(&["a", "b", "not an id", ""], 2, true));
        assert_eq!(v.len(), 2);
        assert_eq!(v.lookup("c", 1), Listing::Refresh);
        assert_eq!(v.begin_refresh(1), 2);
        v.end_refresh(page(&["c"], 1, false));
        assert_eq!(v.lookup("c", 2), Listing::Listed);
        assert_eq!(
            v.begin_refresh(CATALOG_FRESH_MS + 2),
            2,
            "the cursor never goes back"
        );
    }

    #[test]
    fn the_view_holds_no_more_ids_than_the_catalog_may() {
        let mut v = CatalogView::default();
        let ids: Vec<String> = (0..PRODUCTS_MAX + 5).map(|i| format!("p{i}")).collect();
        v.end_refresh(CatalogPage {
            ids,
            next: 1,
            more: false,
        });
        v.insert("one-more");
        assert_eq!(v.len(), PRODUCTS_MAX);
    }

    #[test]
    fn an_id_registered_here_is_known_at_once() {
        let mut v = CatalogView::default();
        v.begin_refresh(0);
        v.end_refresh(page(&[], 0, false));
        assert_eq!(v.lookup("new", 1), Listing::Unlisted);
        v.insert("new");
        assert_eq!(v.lookup("new", 1), Listing::Listed);
    }
}
