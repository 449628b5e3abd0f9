/* The transformer's parameter table as the network interface states it. */
#include "train/net_transformer.h"

#include <stdlib.h>
#include <string.h>

#include "train/pipeline.h"

/* What the adapter keeps: the model it describes, the pipeline that runs
 * it and the last step's losses. */
typedef struct TransformerNet {
  Model *model;
  Pipeline *pipe;
  double lm, aux, z;
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

static int transformer_forward(Network *net, int chunk, const void *batch, Error *err) {
  TransformerNet *t = net->impl;
  (void)chunk; /* the action names it */
  if (!t->pipe) return error_set(err, ERR_INTERNAL, "transformer network: no pipeline bound");
  return pipeline_forward(t->pipe, batch, err);
}

static int transformer_backward(Network *net, int chunk, const void *batch, float loss_scale, Error *err) {
  TransformerNet *t = net->impl;
  (void)chunk;
  (void)loss_scale; /* the pipeline scales by the step's 1 / (accumulation x replicas) */
  if (!t->pipe) return error_set(err, ERR_INTERNAL, "transformer network: no pipeline bound");
  return pipeline_backward(t->pipe, batch, err);
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

static void transformer_free(Network *net) { free(net->impl); }

static const NetworkOps TRANSFORMER_OPS = {
    .family = "transformer", .forward = transformer_forward, .backward = transformer_backward,
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
  for (int i = 0; i < m->num_tensors; i++) {
    const ParamTensor *p = &m->tensors[i];
    NetParam *q = &net->params[i];
    q->name = p->name;
    q->ndim = p->ndim;
    for (int d = 0; d < p->ndim && d < NET_MAX_DIMS; d++) q->shape[d] = p->shape[d];
    q->offset = p->offset;
    q->numel = p->numel;
    q->reduce = reduce_group_of(p);
    q->sharded = is_slice(p);
    q->no_weight_decay = p->no_weight_decay;
    q->param_group = 0;
  }
  net->ops = &TRANSFORMER_OPS;
  net->impl = t;
  net->num_tensors = m->num_tensors;
  net->values = m->params;
  net->grads = m->grads;
  net->num_values = m->num_params;
  net->num_param_groups = 1;
  net->num_chunks = m->shard.num_chunks > 0 ? m->shard.num_chunks : 1;
  return 0;
}
