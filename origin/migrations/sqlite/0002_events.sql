-- Stock totals and voids travel the gate's outbox with the orders. The
-- products row keeps its counts, so a read is one row, not a COUNT/SUM
-- over every order, and the last stock event applied, so totals only move
-- forward.
ALTER TABLE products ADD COLUMN stock_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE products ADD COLUMN orders_accepted INTEGER NOT NULL DEFAULT 0;
ALTER TABLE products ADD COLUMN orders_rejected INTEGER NOT NULL DEFAULT 0;
ALTER TABLE products ADD COLUMN orders_voided INTEGER NOT NULL DEFAULT 0;
-- 'voided' joins 'accepted' and 'rejected_oversell'.
ALTER TABLE orders ADD COLUMN voided_at INTEGER;
UPDATE products SET
    orders_accepted = (SELECT COUNT(*) FROM orders o WHERE o.product_id = products.id AND o.status = 'accepted'),
    orders_rejected = (SELECT COUNT(*) FROM orders o WHERE o.product_id = products.id AND o.status = 'rejected_oversell');
