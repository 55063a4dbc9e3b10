-- The origin's tables on SQLite (the embedded default).
CREATE TABLE products (
    id          TEXT PRIMARY KEY NOT NULL,
    stock_total INTEGER NOT NULL CHECK (stock_total >= 0),
    sold        INTEGER NOT NULL DEFAULT 0 CHECK (sold >= 0),
    -- The last line of defence: the origin never records more sold units
    -- than the product has.
    CHECK (sold <= stock_total)
);

CREATE TABLE orders (
    -- The cursor for pagination, in arrival order.
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    reservation_id TEXT NOT NULL UNIQUE,
    product_id     TEXT NOT NULL REFERENCES products (id),
    buyer_id       TEXT NOT NULL,
    quantity       INTEGER NOT NULL CHECK (quantity > 0),
    payment_ref    TEXT NOT NULL,
    confirmed_at   INTEGER NOT NULL,
    received_at    INTEGER NOT NULL,
    -- 'accepted', or 'rejected_oversell' (a bug signal; never expected).
    status         TEXT NOT NULL
);

CREATE INDEX orders_by_product ON orders (product_id, id);
