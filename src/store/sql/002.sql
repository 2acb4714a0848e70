-- 1 -> 2: nodes.  A node (a handle that leased) beats every third of
-- its TTL; one silent past its TTL has its leases taken even before
-- their own deadlines (a long lease renewed far ahead by a host that
-- then froze or was cut off).
CREATE TABLE mesh.nodes (holder bigint PRIMARY KEY, name text NOT NULL, host text NOT NULL,
 program text NOT NULL, job int NOT NULL, started bigint NOT NULL, beat bigint NOT NULL,
 ttl_us bigint NOT NULL, chunks bigint NOT NULL DEFAULT 0, busy_us bigint NOT NULL DEFAULT 0,
 stopped boolean NOT NULL DEFAULT false);
