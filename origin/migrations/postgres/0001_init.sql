-- The origin's tables on PostgreSQL.
CREATE TABLE products (
    id          TEXT PRIMARY KEY,
    stock_total BIGINT NOT NULL CHECK (stock_total >= 0),
    sold        BIGINT NOT NULL DEFAULT 0 CHECK (sold >= 0),
    -- The last line of defence: the origin never records more sold units
    -- than the product has.
    CHECK (sold <= stock_total)
);

CREATE TABLE orders (
    -- The cursor for pagination, in arrival order.
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reservation_id TEXT NOT NULL UNIQUE,
    product_id     TEXT NOT NULL REFERENCES products (id),
    buyer_id       TEXT NOT NULL,
    quantity       BIGINT NOT NULL CHECK (quantity > 0),
    payment_ref    TEXT NOT NULL,
    confirmed_at   BIGINT NOT NULL,
    received_at    BIGINT NOT NULL,
    -- 'accepted', or 'rejected_oversell' (a bug signal; never expected).
    status         TEXT NOT NULL
);

CREATE INDEX orders_by_product ON orders (product_id, id);
