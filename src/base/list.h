/* The one doubly-linked list: intrusive (the links live in the element, a
 * list allocates nothing), typed (the links point at the element's own
 * type, so a walk needs no cast), and valid when all zero (an empty list,
 * an element on none), so a calloc'd owner needs no init call.
 *
 *   struct conn { MESH_LINK(struct conn) link; ... };
 *   struct server { MESH_LIST(struct conn) conns; ... };
 *   mesh_list_push(&s->conns, c, link);
 *   for (struct conn *c = s->conns.head; c; c = c->link.next) ...
 *   mesh_list_remove(&s->conns, c, link);
 *
 * An element is on at most one list through a given link field; remove
 * clears its links.  Not thread-safe: the owner's lock or thread guards
 * the list. */
#ifndef MESH_BASE_LIST_H
#define MESH_BASE_LIST_H

#include <stddef.h>

#define MESH_LINK(type) \
	struct { \
		type *prev, *next; \
	}
#define MESH_LIST(type) \
	struct { \
		type *head, *tail; \
	}

/* Puts e after `after` on l; after NULL: at the head. */
#define mesh_list_insert_after(l, after, e, f) \
	do { \
		__typeof__(e) e_ = (e), a_ = (after); \
		e_->f.prev = a_; \
		e_->f.next = a_ ? a_->f.next : (l)->head; \
		if (e_->f.next) \
			e_->f.next->f.prev = e_; \
		else \
			(l)->tail = e_; \
		if (a_) \
			a_->f.next = e_; \
		else \
			(l)->head = e_; \
	} while (0)

/* Puts e at the tail of l. */
#define mesh_list_push(l, e, f) mesh_list_insert_after(l, (l)->tail, e, f)

/* Takes e off l and clears its links. */
#define mesh_list_remove(l, e, f) \
	do { \
		__typeof__(e) r_ = (e); \
		if (r_->f.prev) \
			r_->f.prev->f.next = r_->f.next; \
		else \
			(l)->head = r_->f.next; \
		if (r_->f.next) \
			r_->f.next->f.prev = r_->f.prev; \
		else \
			(l)->tail = r_->f.prev; \
		r_->f.prev = r_->f.next = NULL; \
	} while (0)

#endif
