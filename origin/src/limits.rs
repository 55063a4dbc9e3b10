//! Every limit of the origin service, in one place: what a request, a
//! connection and the whole service may hold, and for how long. A limit
//! that a flag can change names its flag; the constant is its default.

use std::time::Duration;

/// The largest request body: a full batch of 500 events is far below it.
pub const BODY_BYTES_MAX: usize = 1024 * 1024;
/// The longest a request body may take to arrive, counted from the end of
/// its head to its last byte (`serve --body-deadline-ms`). A deadline for
/// the whole body, not for each frame: a body that trickles in a byte at a
/// time is cut here all the same.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a request may take, end to end.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A client must send its request head within this.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request head, in bytes (the connection's read buffer). A
/// bigger one is answered 431 by hyper. The origin's credentials and
/// signature headers take well under 1 KiB; hyper needs at least 8 KiB.
pub const HEADER_BYTES_MAX: usize = 16 * 1024;
/// The most header fields in one request head.
pub const HEADER_FIELDS_MAX: usize = 64;
/// Connections open at once (`serve --connections-max`). Past it, a new
/// connection is closed as soon as it is accepted, so anonymous clients can
/// hold at most this many heads' buffers, and no body: a body is read only
/// after the credential in the head is checked.
pub const CONNECTIONS_MAX: usize = 1024;
/// On shutdown, open requests get this long to finish.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);
/// The largest page of orders.
pub const ORDERS_PAGE_MAX: i64 = 1000;
/// Reads served at once; more are shed with 503 and `Retry-After`.
pub const READS_IN_FLIGHT_MAX: usize = 16;
/// Batches taken at once (from their signed headers to their answer); more
/// are shed with 503 and `Retry-After`, which the gate's outbox retries.
/// Each may hold a body of up to `BODY_BYTES_MAX`, so this bounds what
/// batches in flight hold in memory to 32 MiB.
pub const BATCHES_IN_FLIGHT_MAX: usize = 32;
/// How long a minted buyer token lives unless the shop asks for less.
pub const BUYER_TOKEN_TTL_S: u64 = 60 * 60;
/// How long the gate may take to answer a demo payment's confirmation.
pub const GATE_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times a batch transaction is retried when the database reports
/// a deadlock or a serialization failure, which concurrent deliveries of the
/// same batch can cause on PostgreSQL.
pub const TX_ATTEMPTS_MAX: u32 = 5;
/// Connections of the read pool: reads beyond them wait (and are shed
/// further up by the router's concurrency limit).
pub const READ_CONNECTIONS_MAX: u32 = 4;
/// Connections of the write pool on PostgreSQL. SQLite has one writer.
pub const WRITE_CONNECTIONS_MAX: u32 = 8;

// The body's deadline must fall inside the request's, or the request's
// would cut a slow body first and answer with the wrong code.
const _: () = assert!(BODY_READ_TIMEOUT.as_millis() < REQUEST_TIMEOUT.as_millis());
// hyper refuses a read buffer below 8 KiB.
const _: () = assert!(HEADER_BYTES_MAX >= 8 * 1024);
