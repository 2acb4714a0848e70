-- 9 -> 10: stopped nodes are pruned.  A node's registration removes the
-- stopped rows whose last beat is a day old (store_pg_nodes.c), found
-- through this index: stopped rows by their registration, which never
-- changes -- beat is in no index, so a beat's or a completion's update
-- of a live row stays a HOT update.
CREATE INDEX nodes_stopped ON mesh.nodes (started) WHERE stopped;
