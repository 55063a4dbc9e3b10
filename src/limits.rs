//! Every limit of the Worker and its objects, in one place, units last.
//! Each bounds a memory, a time or a rate against a flash sale's crowd;
//! the core's own (stock, buyers, holds) are in `flashgate_core::limits`
//! and the origin's wire bounds in `flashgate_wire::bounds`.

// edge/auth.rs

/// How long a dev session's token lasts.
pub const SESSION_TTL_S: u64 = 60 * 60;

// wasm/http.rs

/// How many distinct sets of reply fields an isolate keeps built
/// (`http::respond`); past it the set is emptied and built again.
pub const REPLY_FIELD_SETS_MAX: u32 = 64;

// edge/cache.rs

/// How long a snapshot answers for the edge: the lag `sold_out` promises
/// (`SOLD_OUT_LAG_MS`, the same in the core and in the wire contract the
/// load tool checks it by). A snapshot whose `sold_out` was proven some
/// time before it was taken answers that much less.
pub const SNAPSHOT_FRESH_MS: u64 = flashgate_core::escrow::limits::SOLD_OUT_LAG_MS;
// The core states the lag, the wire contract the load tool checks it by.
const _: () = assert!(
    flashgate_core::escrow::limits::SOLD_OUT_LAG_MS == flashgate_wire::bounds::SOLD_OUT_LAG_MS
);

/// A snapshot with less than this left of its freshness is fetched anew by
/// the next request that reads it, while the others answer from it
/// (`EdgeCache::lookup`): more than a sharded product's fetch takes,
/// drains of its shards included, so that a steady crowd never waits.
pub const REFRESH_AHEAD_MS: u64 = SNAPSHOT_FRESH_MS / 2;

/// An id naming a stock shard the snapshot does not list is answered
/// `unknown_reservation` at once from a snapshot younger than this; an
/// older one is fetched anew first, since the shard may have been made
/// since (by its first reserve, through another isolate).
pub const SHARD_MISS_REFRESH_MS: u64 = 100;

/// Products an isolate keeps snapshots of; the map is cleared at this
/// size, which bounds its memory against requests for many random ids.
pub const EDGE_PRODUCTS_MAX: usize = 1_024;

/// Tickets named (`Arrivals::named`) in all of an isolate's reports, sent
/// and unsent, together: each report names at most
/// `limits::ARRIVALS_NAMED_MAX`, and this bounds them across products
/// (about 24 bytes each). Past it a ticket is counted unnamed.
pub const EDGE_NAMED_MAX: usize = 16_384;

/// The oldest snapshot served while another request's fetch is slow.
pub const SNAPSHOT_STALE_MAX_MS: u64 = 10_000;

// edge/routes.rs

/// The largest request body the edge reads.
pub const BODY_BYTES_MAX: usize = 4 * 1024;

/// A page of orders the console reads from the origin through the gate
/// (`GET /admin/products/{id}/orders`): at most this many, and this many
/// when the query names no limit. Far below the origin's own page bound
/// (1,000, `origin/src/limits.rs`), which the Worker does not link.
pub const ADMIN_ORDERS_PAGE_MAX: usize = 100;
pub const ADMIN_ORDERS_PAGE_DEFAULT: usize = 20;
/// The media ranges of an `Accept` field the history route reads
/// (`edge::history::format`); the rest are ignored.
pub const ACCEPT_RANGES_MAX: usize = 16;
const _: () = assert!(ADMIN_ORDERS_PAGE_DEFAULT <= ADMIN_ORDERS_PAGE_MAX);

// edge/page.rs

/// The longest payment origin the page's policy names; a longer one is
/// left out (and the Pay button's call refused by the browser) rather than
/// sent.
pub const PAYMENT_ORIGIN_BYTES_MAX: usize = 256;

// edge/pow.rs

/// PBKDF2 rounds per try of the join's proof of work: the edge's cost to
/// verify one payload, and a try's cost to a solver. At this cost the
/// browser's WebCrypto spends most of a try deriving, not in call overhead,
/// so a native script solves little faster than a page (the measurements
/// are in bench/RESULTS.md, "The waiting room's proof of work").
pub const POW_COST_ROUNDS: u32 = 250;
/// How long a challenge may be answered: long enough for a slow phone's
/// solve at the highest level (a minute and more on average), so that few
/// honest solves are thrown away. A stock of payloads solved before a raise
/// is refused by its level, whatever its age (docs/proof-of-work.md, "When
/// the level rises"), so a shorter life would buy nothing against it.
pub const POW_CHALLENGE_TTL_MS: u64 = 5 * 60 * 1000;

// edge/ticket.rs

/// The longest ticket accepted, in bytes.
pub const TICKET_BYTES_MAX: usize = 512;

// object/catalog.rs

/// The most products the catalog registers. An update of a product already
/// registered always passes; a new one past this is refused
/// (`catalog_full`).
pub const PRODUCTS_MAX: usize = 10_000;

/// The most products one listing looks at: the newest registered. Each is
/// read through the edge cache, so a listing costs at most this many
/// object reads per isolate per second.
pub const LISTED_MAX: usize = 50;

// object/product.rs

/// The most commands one batch applies: a bound on the work of one turn
/// (and on the replies a failed flush turns into 503s). Commands beyond it
/// wait for the next batch.
pub const COMMANDS_PER_BATCH_MAX: usize = 256;

/// The longest a stock shard waits for its home object's answer to a
/// report (`flashgate_core::escrow`). Objects of one Worker answer in
/// milliseconds; one that does not is treated as a failed call, and the
/// shard's next report goes with the same cumulative counters.
pub const HOME_CALL_TIMEOUT_MS: u64 = 2_000;
/// The longest home holds a shard's ask (or its own reserves, or a
/// snapshot) while it drains other shards; then it answers with what it
/// knows (`Elsewhere::Unknown` for a shard that did not answer). Below
/// `HOME_CALL_TIMEOUT_MS`, so that the shard hears the answer.
pub const ASK_WAIT_MAX_MS: u64 = 1_200;
/// The longest home waits for a shard's answer to one push.
pub const PUSH_TIMEOUT_MS: u64 = 800;
/// At home, the longest an ask or a batch that waits for another's drains
/// goes without looking again, if nothing wakes it first. It wakes when
/// anything it waits for changes; this bounds how late it sees a change
/// that only time makes (`ENDGAME_OWNER_MS`, `GRANT_IN_USE_MS`).
pub const HOME_RECHECK_MS: u64 = 10;
const _: () = assert!(PUSH_TIMEOUT_MS < ASK_WAIT_MAX_MS);
const _: () = assert!(ASK_WAIT_MAX_MS < HOME_CALL_TIMEOUT_MS);

// object/home_call.rs

/// The most calls home one batch of reserves makes.
pub const CALL_ROUNDS_MAX: u32 = 3;

// object/delivery.rs

/// How long one delivery to the origin may take before it counts as failed.
pub const ORIGIN_TIMEOUT_MS: u64 = 10_000;

/// Batches one alarm sends before yielding; the next alarm continues.
pub const BATCHES_PER_ALARM_MAX: usize = 20;

/// The most events one batch carries: what the origin accepts.
pub const EVENTS_PER_BATCH_MAX: usize = flashgate_wire::bounds::ORDERS_PER_BATCH_MAX;

// object/live.rs

/// The shortest time between two pushes of one product: at most 10 a second.
pub const PUSH_INTERVAL_MS: u64 = 100;

/// What one send to one socket costs workerd, in microseconds of CPU.
/// Measured (`node bench/live.mjs`): 58 us per socket for this object's
/// broadcast and 62 us for a JavaScript object that does nothing but fan
/// out, so it is the runtime's own cost of a WebSocket send.
pub const SEND_US_PER_SOCKET: u64 = 60;

/// The most of its time an object spends on fan-out: pushes to many sockets
/// come less often, so that the object keeps deciding reservations.
pub const FANOUT_SHARE_MAX_PERCENT: u64 = 25;

/// The most sockets one product's object keeps by default. Past it, a new
/// viewer is refused with `live_full` and told to poll the edge-cached
/// product read, so that a hot product's object does not spend its time on
/// fan-out. Measured (`node bench/live.mjs`, bench/RESULTS.md, "Live
/// updates"): a broadcast to 2,000 sockets costs workerd about 116 ms of
/// CPU, the runtime's own cost of 2,000 sends, so pushes to that many come
/// about twice a second (`push_interval_ms`).
pub const LIVE_SOCKETS_MAX_DEFAULT: u32 = 2_000;

/// The most a deployment may set (`LIVE_SOCKETS_MAX`): workerd keeps at
/// most 32,768 hibernatable sockets per object.
pub const LIVE_SOCKETS_MAX_MAX: u32 = 32_000;

/// The most sockets one client (an address, an IPv6 client's /64: the IP
/// limit's key) keeps open on one product: a few tabs. Without it a handful
/// of addresses could take every place (`LIVE_SOCKETS_MAX`) and hold it,
/// since the runtime answers their pings, and every other viewer would be
/// sent to poll.
pub const LIVE_SOCKETS_PER_CLIENT_MAX: usize = 8;

// protocol/buyer_filter.rs

/// The largest buyer filter published, in bytes: the core's largest.
pub const FILTER_BYTES_MAX: usize = flashgate_core::limits::BLOOM_BYTES_MAX;

// protocol/mod.rs

/// The most bytes of a command sent as a header (a watch, whose ids are
/// bounded far below it); a longer one has no header form.
pub const COMMAND_HEADER_BYTES_MAX: usize = 4096;

// edge/admin.rs, wasm/edge/objects.rs

/// How long the edge reuses the catalog's list: a new product shows within
/// this much of being created.
pub const LISTED_FRESH_MS: u64 = 5_000;

/// How long a request waits for another's snapshot fetch, and how often it
/// looks.
pub const REFRESH_WAIT_MAX_MS: u64 = 2_000;

pub const REFRESH_POLL_MS: u64 = 5;

/// A request waiting for another's snapshot fetch is woken when it lands;
/// it looks again after this in case the fetching request was cancelled
/// and no landing comes.
pub const SNAPSHOT_RECHECK_MS: u64 = 50;

// wasm/object/sqlite.rs

/// Rows read from a cursor per call: a query's rows are never all held at
/// once (a restore streams every row of the object), and a chunk is small.
pub const ROWS_PER_CALL_MAX: u32 = 256;

// the edge's view of the catalog

/// How long the edge's view of which products exist answers an id it does
/// not hold, before a miss reads the catalog again (`edge::catalog`).
pub const CATALOG_FRESH_MS: u64 = 1_000;
/// How long a request that misses waits for another's catalog read in
/// flight before it reads itself (`edge::catalog`).
pub const CATALOG_READ_WAIT_MAX_MS: u64 = 2_000;
/// The most ids one read of the catalog returns.
pub const CATALOG_PAGE_MAX: usize = 1_000;
