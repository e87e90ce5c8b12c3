/* cube/graph.h: capture a sequence of work on a stream once, replay it.
 *
 * cube_client_capture_begin puts the client's stream into capture: from then
 * on, launches, cube_client_write and cube_client_copy calls and collectives
 * (all_reduce, send, recv, sync_collective: cube/collective.h) on that stream
 * are recorded instead of queued (they are checked as they would be, and
 * return at once). cube_client_capture_end ends the capture into a graph.
 * cube_client_replay queues the whole graph on a stream as one task: on the
 * runner, the recorded launches, writes, copies and collectives run in
 * capture order with their arguments as captured, each buffer resolved once
 * per replay.
 *
 * What a capture refuses, with FAILED_PRECONDITION naming the call: reads
 * (their result would belong to the capture, not to a replay), syncs and
 * flushes (a graph cannot wait for itself), allocation from the stream's
 * pools (a replay would reuse a buffer the capture saw free), the set-up of
 * a communicator (cube_client_ensure_init_collective). Allocate, upload and
 * set up before cube_client_capture_begin.
 *
 * Collectives. A captured all_reduce, send or recv is this participant's
 * part, run again by each replay at its place in the node order, on the
 * replay's stream (its failures are deferred there), with its buffers as
 * slots like a launch's; a captured sync_collective waits there for what the
 * replay's stream has pending, as the eager call does. Every participant
 * captures and replays its own graph, and each replay must be matched by the
 * other participants' (replays, or eager calls), in the same order, as
 * eager collectives must. A graph with a collective replays node by node.
 *
 * Buffers. A graph holds a binding reference on every buffer it uses: the
 * handles may be released after the capture and the graph still replays on
 * that memory, which no pool reuses, carves or moves while the graph lives.
 * The buffers a graph uses are its slots, numbered in the order of their
 * first use in the capture (a launch's buffers in argument order, a copy's
 * source before its destination; cube_graph_slot_of finds a handle's slot). A
 * replay may substitute a live buffer of the same device and the same view
 * size for any slot: one graph then serves every step of a loop whose inputs
 * change. A substitute that is released, of another device or of another
 * size is refused by the replay call; nothing runs. Scalars too: a replay
 * may give any scalar argument of any recorded launch a new value of the
 * same kind (cube_client_replay_with), for that replay only.
 *
 * Backends. Where the device's driver has graphs of its own (CUDA), the
 * first replay builds and instantiates one native graph of the nodes (a
 * copy is a device-to-device memcpy node), and
 * later replays launch it as one unit; a replay that rebinds updates the
 * parameters of the nodes it changes, it does not build the graph again
 * (cube_graph_is_native says whether a graph runs so; CUBE_GRAPHS_NATIVE=0
 * turns it off). Elsewhere (CPU, OpenCL), and for graphs a native graph
 * cannot express (a dynamic count, a Validate-mode launch, a collective), a
 * replay runs the recorded nodes one after the other on the runner, each
 * argument resolved once per replay. Both give the same results.
 *
 * Thread safety: capture is per stream (the calling thread's stream, or the
 * client's pinned one); the other calls are thread-safe, and one graph may
 * be replayed from several threads on their own streams at once.
 *
 * Ownership: the caller owns a graph and releases it with
 * cube_graph_release, before cube_shutdown. A replay keeps the graph alive
 * until it ran.
 *
 * Automatic capture (CUBE_GRAPHS=auto, or cube_server_options_t.graphs; off
 * by default). A step is the launches queued on a stream between two of its
 * boundaries: a read, a write, a sync, a flush, a memory usage, a replay, a
 * capture_begin, a collective. A stream whose step repeats (the same kernels,
 * counts, modes and scalars, views of the same sizes used in the same
 * pattern; the buffers may differ) runs it eagerly graphs_warmup times, then
 * holds the launches of each next step, compares them with it as they come,
 * and queues the step as one replay of a graph with the step's buffers
 * substituted once its last launch matched. A launch that differs, or a
 * boundary before the step is complete, queues what was held eagerly at once
 * (in order) and the stream learns again. Nothing else changes: every call
 * is checked and allowed as without it, results and deferred errors are the
 * eager ones, and work on other streams that uses a buffer of a held step
 * (or cube_client_exclusive, cube_client_profile, cube_shutdown) queues the
 * held launches first. A capture in progress turns it off for its stream.
 * With a profile level of exec or more, the log says when a stream starts
 * replaying and when it falls back ("graph auto: stream N: ..."). The design
 * is docs/graphs.md, "Automatic capture".
 */
#ifndef CUBE_GRAPH_H_
#define CUBE_GRAPH_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/client.h"
#include "cube/kernel.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cube_graph_s cube_graph_t;

/* A substitute buffer for one slot of a replay. */
typedef struct cube_graph_binding {
  uint32_t slot;       /* the slot (cube_graph_slot_of) */
  cube_handle_t with;  /* a live handle of the graph's device, of the slot's view size */
} cube_graph_binding_t;

/* A new value for one scalar argument of one recorded launch, for one
 * replay. */
typedef struct cube_graph_scalar {
  uint32_t node;    /* the node, in capture order (0: the first one recorded) */
  uint32_t arg;     /* the launch's argument index */
  cube_arg_t value; /* a scalar of the argument's kind (CUBE_ARG_U32 ...) */
} cube_graph_scalar_t;

/* Starts capturing on the client's stream. Work queued on the stream before
 * the call is not part of the graph and runs as queued. Fails with
 * INVALID_ARGUMENT (a NULL client), FAILED_PRECONDITION (the stream is
 * capturing already), OUT_OF_MEMORY. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_capture_begin(cube_client_t* client);

/* Ends the capture of the client's stream into |*out_graph| (the caller
 * owns it; a capture of nothing is a graph of 0 nodes). Fails with
 * INVALID_ARGUMENT (NULL client or out_graph), FAILED_PRECONDITION (the
 * stream is not capturing), or with the first failure recorded during the
 * capture (then no graph is made and the capture is over). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_capture_end(cube_client_t* client,
                                                           cube_graph_t** out_graph);

/* Queues |graph| on the client's stream, with |binding_count| substitutes
 * (|bindings| may be NULL when the count is 0). Returns once it is queued;
 * failures while it runs are deferred to the stream, as a launch's are. Fails
 * at once with INVALID_ARGUMENT (NULL client or graph, a graph of another
 * device, a slot the graph does not have or named twice, a substitute of
 * another device or whose view size differs from the slot's, substitutes
 * that make a copy's source and destination overlap, naming the node; a
 * copy whose source and destination become the same view does nothing in
 * that replay), NOT_FOUND (a released substitute), FAILED_PRECONDITION (the
 * stream is capturing: graphs do not nest), OUT_OF_MEMORY. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_replay(cube_client_t* client, cube_graph_t* graph,
                                                      size_t binding_count,
                                                      const cube_graph_binding_t* bindings);

/* cube_client_replay with |scalar_count| scalar substitutes as well
 * (|scalars| may be NULL when the count is 0). Fails as cube_client_replay
 * does, and with INVALID_ARGUMENT for a node the graph does not have or that
 * is not a launch (a write, a copy, a collective), an argument index beyond
 * the launch's, an argument that is a buffer, a value of another kind than
 * the argument's, or one (node, arg) named twice. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_replay_with(cube_client_t* client,
                                                           cube_graph_t* graph,
                                                           size_t binding_count,
                                                           const cube_graph_binding_t* bindings,
                                                           size_t scalar_count,
                                                           const cube_graph_scalar_t* scalars);

/* True once a replay of |graph| ran as one native graph of the device's
 * driver (false for NULL, before the first replay, and where replays run
 * node by node). Thread-safe. */
bool cube_graph_is_native(const cube_graph_t* graph);

/* Nodes (recorded launches, writes, copies and collectives) and slots
 * (distinct buffer views) of |graph|; 0 for NULL. Thread-safe. */
size_t cube_graph_node_count(const cube_graph_t* graph);
size_t cube_graph_slot_count(const cube_graph_t* graph);

/* The slot of the buffer view of |handle| (a live handle of |client|'s
 * device) in |graph|. Fails with INVALID_ARGUMENT (NULL arguments, a handle
 * of another device), NOT_FOUND (a released handle, or one whose view the
 * graph does not use). */
CUBE_MUST_USE_RESULT cube_status_t cube_graph_slot_of(const cube_graph_t* graph,
                                                      cube_client_t* client, cube_handle_t handle,
                                                      uint32_t* out_slot);

/* Drops the caller's reference (NULL is ignored); the graph's buffers and
 * kernels are let go once no queued replay uses it. Letting go of a native
 * graph (cube_graph_is_native) waits for its replays still running on the
 * device, whose copies read memory the native graph owns. Thread-safe. */
void cube_graph_release(cube_graph_t* graph);

/* What automatic capture did on a device, since its server was created,
 * summed over its streams (an output struct: cube/cube.h, "Struct sizes"). */
typedef struct cube_graph_auto_stats {
  size_t struct_size;
  uint64_t graphs;            /* steps learned: graphs made */
  uint64_t steps_replayed;    /* steps queued as one replay */
  uint64_t launches_replayed; /* launches those replays ran */
  uint64_t fallbacks;         /* held steps that went back to eager launches because the
                                 sequence changed (the graph was dropped) */
  uint64_t interruptions;     /* held steps queued eagerly for a reason outside the step
                                 (another stream used a buffer, exclusive, shutdown); the
                                 graph was kept */
} cube_graph_auto_stats_t;

/* Writes automatic capture's counts for |client|'s device into |out_stats|
 * (all zero when its graphs option is off). Fails with INVALID_ARGUMENT (NULL
 * arguments) or UNSUPPORTED (a struct_size this library does not know).
 * Thread-safe; the counts are those of the moment of the call. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_graph_auto_stats(cube_client_t* client,
                                                                cube_graph_auto_stats_t* out_stats);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_GRAPH_H_ */
