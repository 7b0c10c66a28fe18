/* A graph job's C steps on two threads of a core's process (graph_steps.c). */

/* The steps of a job in a topological order: step i waits for the steps at positions
   deps[dep_start[i] .. dep_start[i + 1]) (earlier ones), `done` has `count` flags. */
struct npu_graph {
    const struct npu_step *steps;
    int32_t count;
    const int32_t *dep_start;
    const int32_t *deps;
    int32_t *done;
};

/* Runs the graph's steps on this thread and a helper thread of the process (started on first
   use), each taking the next step in order once its dependencies are done; returns 0, or the
   status of a failing step with *failed set to its position (the others stop). */
int npu_graph_run(const struct npu_graph *g, int32_t *failed);
