/* The transformer's parameter table as the network interface states it. */
#include "train/net_transformer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "train/pipeline.h"

/* What the adapter keeps: the model it describes, the pipeline that runs
 * it and the last step's losses. */
typedef struct TransformerNet {
  Model *model;
  Pipeline *pipe;
  double lm, aux, z;
  ParamTensor *global; /* the whole model's tensors (model_global_tensors), named by net->logical */
  int num_global;
} TransformerNet;

/* Routed experts on the dispatcher path sum over EDP; a tensor every TP
 * rank holds whole (norms, the router under sequence parallelism) also
 * over TP; everything else over the data-parallel replicas. */
static NetReduceGroup reduce_group_of(const ParamTensor *p) {
  if (p->reduce_over_edp) return NET_REDUCE_EXPERT;
  if (p->tp_replicated && p->tp_ranks > 1) return NET_REDUCE_TP_REPLICATED;
  return NET_REDUCE_DENSE;
}

static int is_slice(const ParamTensor *p) {
  if (p->tied_copy) return 1;
  for (int d = 0; d < p->ndim; d++)
    if (p->shape[d] != p->global_shape[d]) return 1;
  return 0;
}

/* The pipeline that runs every pass and transfer, or NULL with err set. */
static Pipeline *bound_pipeline(Network *net, Error *err) {
  TransformerNet *t = net->impl;
  if (!t->pipe) error_set(err, ERR_INTERNAL, "transformer network: no pipeline bound");
  return t->pipe;
}

static int transformer_forward(Network *net, int chunk, const void *batch, Error *err) {
  (void)chunk; /* the action names it */
  Pipeline *p = bound_pipeline(net, err);
  return p ? pipeline_forward(p, batch, err) : ERR_INTERNAL;
}

static int transformer_backward(Network *net, int chunk, const void *batch, float loss_scale, Error *err) {
  (void)chunk;
  (void)loss_scale; /* the pipeline scales by the step's 1 / (accumulation x replicas) */
  Pipeline *p = bound_pipeline(net, err);
  return p ? pipeline_backward(p, batch, err) : ERR_INTERNAL;
}

/* Activations and their gradients between pipeline stages, by the pipeline. */
static int transformer_send(Network *net, const void *action, Error *err) {
  Pipeline *p = bound_pipeline(net, err);
  return p ? pipeline_send(p, action, err) : ERR_INTERNAL;
}

static int transformer_recv(Network *net, const void *action, Error *err) {
  Pipeline *p = bound_pipeline(net, err);
  return p ? pipeline_recv(p, action, err) : ERR_INTERNAL;
}

static int transformer_prepare(Network *net, const void *action, Error *err) {
  Pipeline *p = bound_pipeline(net, err);
  return p ? pipeline_prepare(p, action, err) : ERR_INTERNAL;
}

/* The loss and its parts; a dense model's log line shows the loss alone
 * (its aux and z are 0), an MoE model's "(lm 2.301 aux 0.0121 z 0.0008)". */
static int transformer_metrics(const Network *net, NetMetric *metrics, int cap) {
  const TransformerNet *t = net->impl;
  int moe = model_config_num_moe_layers(&t->model->cfg) > 0;
  const NetMetric all[] = {{"loss", t->lm + t->aux + t->z, 3},
                           {"lm", t->lm, moe ? 3 : 0},
                           {"aux", t->aux, moe ? 4 : 0},
                           {"z", t->z, moe ? 4 : 0}};
  int n = (int)(sizeof all / sizeof all[0]);
  for (int i = 0; i < n && i < cap; i++) metrics[i] = all[i];
  return n;
}

static void transformer_free(Network *net) {
  TransformerNet *t = net->impl;
  if (t) free(t->global);
  free((void *)net->logical);
  free(t);
}

static const NetworkOps TRANSFORMER_OPS = {
    .family = "transformer", .forward = transformer_forward, .backward = transformer_backward,
    .send = transformer_send, .recv = transformer_recv, .prepare = transformer_prepare,
    .metrics = transformer_metrics, .metrics_per_step = 1, .unit = {"token", "tokens", "tok/s"},
    .free = transformer_free};

void net_transformer_set_step_losses(Network *net, double lm, double aux, double z) {
  TransformerNet *t = net->impl;
  if (!t) return;
  t->lm = lm;
  t->aux = aux;
  t->z = z;
}

void net_transformer_set_pipeline(Network *net, Pipeline *pipe) {
  TransformerNet *t = net->impl;
  if (t) t->pipe = pipe;
}

/* One entry of the network's table from one of the model's. */
static void net_param_of(const ParamTensor *p, int tp_size, NetParam *q) {
  memset(q, 0, sizeof *q);
  q->name = p->name;
  q->ndim = p->ndim;
  for (int d = 0; d < p->ndim && d < NET_MAX_DIMS; d++) {
    q->shape[d] = p->shape[d];
    q->logical_shape[d] = p->global_shape[d];
  }
  q->view_ndim = p->view_ndim;
  for (int d = 0; d < p->view_ndim && d < NET_MAX_DIMS; d++) {
    q->view_shape[d] = p->view_shape[d];
    q->view_start[d] = p->view_start[d];
    q->view_count[d] = p->view_count[d];
  }
  q->offset = p->offset;
  q->numel = p->numel;
  q->reduce = reduce_group_of(p);
  q->sharded = is_slice(p);
  q->tp_copies = p->tp_ranks > 0 ? p->tp_ranks : p->tp_replicated ? tp_size : 1;
  q->copy_of = p->tied_copy ? "embed.weight" : NULL;
  q->no_weight_decay = p->no_weight_decay;
  q->param_group = 0;
}

/* The logical tensors a checkpoint stores: the whole model's, from its config. */
static int bind_logical(Network *net, TransformerNet *t, const Model *m, Error *err) {
  int rc = model_global_tensors(&m->cfg, &t->global, &t->num_global, err);
  if (rc) return rc;
  NetParam *logical = calloc((size_t)(t->num_global > 0 ? t->num_global : 1), sizeof *logical);
  if (!logical) return error_set(err, ERR_NOMEM, "out of memory for the logical tensor table");
  for (int i = 0; i < t->num_global; i++) net_param_of(&t->global[i], 1, &logical[i]);
  net->logical = logical;
  net->num_logical = t->num_global;
  return 0;
}

int net_transformer_bind(Network *net, Model *m, Error *err) {
  memset(net, 0, sizeof *net);
  TransformerNet *t = calloc(1, sizeof *t);
  net->params = calloc((size_t)(m->num_tensors > 0 ? m->num_tensors : 1), sizeof *net->params);
  if (!t || !net->params) {
    free(t);
    free(net->params);
    net->params = NULL;
    return error_set(err, ERR_NOMEM, "out of memory for the parameter table");
  }
  t->model = m;
  for (int i = 0; i < m->num_tensors; i++) net_param_of(&m->tensors[i], m->shard.tp_size, &net->params[i]);
  net->ops = &TRANSFORMER_OPS;
  net->impl = t;
  net->num_tensors = m->num_tensors;
  net->values = m->params;
  net->grads = m->grads;
  net->num_values = m->num_params;
  net->num_param_groups = 1;
  net->num_chunks = m->shard.num_chunks > 0 ? m->shard.num_chunks : 1;
  int rc = bind_logical(net, t, m, err);
  if (rc) network_free(net);
  return rc;
}

int net_transformer_checkpoint_view(Network *net, cJSON **record, Model *m, Error *err) {
  *record = NULL;
  int rc = net_transformer_bind(net, m, err);
  if (rc) return rc;
  *record = model_config_to_json(&m->cfg);
  if (*record) return 0;
  network_free(net);
  return error_set(err, ERR_NOMEM, "out of memory for the model config record");
}

int net_transformer_load_weights(const char *ckpt_dir, Model *m, Error *err) {
  Network net;
  cJSON *record;
  int rc = net_transformer_checkpoint_view(&net, &record, m, err);
  if (rc) return rc;
  rc = checkpoint_load_weights(ckpt_dir, &net, record, err);
  cJSON_Delete(record);
  network_free(&net);
  return rc;
}

int net_transformer_load_training(const char *ckpt_dir, Model *m, CheckpointOptimizer *opt, CheckpointTrainState *st,
                                  Error *err) {
  Network net;
  cJSON *record;
  int rc = net_transformer_checkpoint_view(&net, &record, m, err);
  if (rc) return rc;
  rc = checkpoint_load_training(ckpt_dir, &net, record, opt, st, err);
  cJSON_Delete(record);
  network_free(&net);
  return rc;
}
