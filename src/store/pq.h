/* libpq, PostgreSQL's client library, loaded the first time a store
 * connects (dlopen of libpq.so.5), not linked: a meshd or a `mesh` that
 * never names a PostgreSQL URL does not map it and its two dozen
 * dependencies (GnuTLS, OpenSSL, Kerberos, LDAP: about 5 MB of meshd's
 * resident memory, and their relocations in every `mesh` command).
 *
 * The store's files include this instead of <libpq-fe.h> and call PQ*
 * as before: each name below is a macro for the loaded function.  Only
 * a connection's start may come first, and it calls mesh_pq_load first;
 * every other call takes a connection or a result from one. */
#ifndef MESH_STORE_PQ_H
#define MESH_STORE_PQ_H

#include <libpq-fe.h>
#include <stddef.h>

/* The shared object (MESH_LIBPQ in the environment names another). */
#define MESH_PQ_SONAME "libpq.so.5"
#define MESH_PQ_ENV "MESH_LIBPQ"

#define MESH_PQ_CALLS(X)                                                                                             \
	X(PQclear) X(PQconnectPoll) X(PQconnectStart) X(PQconnectdb) X(PQconninfoFree) X(PQconninfoParse)          \
	X(PQconsumeInput) X(PQenterPipelineMode) X(PQerrorMessage) X(PQexec) X(PQexecParams) X(PQexecPrepared)     \
	X(PQexitPipelineMode) X(PQfinish) X(PQfreemem) X(PQgetResult) X(PQgetisnull) X(PQgetvalue) X(PQnfields)   \
	X(PQnotifies) X(PQntuples) X(PQpipelineSync) X(PQresetPoll) X(PQresetStart) X(PQresultErrorField) X(PQresultStatus)           \
	X(PQsendPrepare) X(PQsendQueryParams) X(PQsendQueryPrepared) X(PQsetNoticeProcessor) X(PQsocket)          \
	X(PQstatus) X(PQtransactionStatus) X(PQunescapeBytea)

struct mesh_pq {
#define MESH_PQ_MEMBER(f) __typeof__(f) *f;
	MESH_PQ_CALLS(MESH_PQ_MEMBER)
#undef MESH_PQ_MEMBER
};

/* Filled once by mesh_pq_load; not to be read before it succeeded. */
extern struct mesh_pq mesh__pq;

/* Loads libpq once (thread-safe; later calls answer the first one's
 * outcome): 0, or MESH_E_UNAVAILABLE with why filled ("cannot load
 * libpq.so.5 ...: <the loader's reason>"). */
int mesh_pq_load(char *why, size_t cap);

#ifndef MESH_PQ_IMPL
#define PQclear (mesh__pq.PQclear)
#define PQconnectPoll (mesh__pq.PQconnectPoll)
#define PQconnectStart (mesh__pq.PQconnectStart)
#define PQconnectdb (mesh__pq.PQconnectdb)
#define PQconninfoFree (mesh__pq.PQconninfoFree)
#define PQconninfoParse (mesh__pq.PQconninfoParse)
#define PQconsumeInput (mesh__pq.PQconsumeInput)
#define PQenterPipelineMode (mesh__pq.PQenterPipelineMode)
#define PQerrorMessage (mesh__pq.PQerrorMessage)
#define PQexec (mesh__pq.PQexec)
#define PQexecParams (mesh__pq.PQexecParams)
#define PQexecPrepared (mesh__pq.PQexecPrepared)
#define PQexitPipelineMode (mesh__pq.PQexitPipelineMode)
#define PQfinish (mesh__pq.PQfinish)
#define PQfreemem (mesh__pq.PQfreemem)
#define PQgetResult (mesh__pq.PQgetResult)
#define PQgetisnull (mesh__pq.PQgetisnull)
#define PQgetvalue (mesh__pq.PQgetvalue)
#define PQnfields (mesh__pq.PQnfields)
#define PQnotifies (mesh__pq.PQnotifies)
#define PQntuples (mesh__pq.PQntuples)
#define PQpipelineSync (mesh__pq.PQpipelineSync)
#define PQresetPoll (mesh__pq.PQresetPoll)
#define PQresetStart (mesh__pq.PQresetStart)
#define PQresultErrorField (mesh__pq.PQresultErrorField)
#define PQresultStatus (mesh__pq.PQresultStatus)
#define PQsendPrepare (mesh__pq.PQsendPrepare)
#define PQsendQueryParams (mesh__pq.PQsendQueryParams)
#define PQsendQueryPrepared (mesh__pq.PQsendQueryPrepared)
#define PQsetNoticeProcessor (mesh__pq.PQsetNoticeProcessor)
#define PQsocket (mesh__pq.PQsocket)
#define PQstatus (mesh__pq.PQstatus)
#define PQtransactionStatus (mesh__pq.PQtransactionStatus)
#define PQunescapeBytea (mesh__pq.PQunescapeBytea)
#endif

#endif
