/* The parts of the network interface that do not depend on a family:
 * lookups over the parameter table, the metrics, and the table's weight
 * matrices in the bf16 weight cache. */
#include "nets/network.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern/bf16_weights.h"

const NetParam *network_find_param(const Network *net, const char *name) {
  for (int i = 0; i < net->num_tensors; i++)
    if (!strcmp(net->params[i].name, name)) return &net->params[i];
  return NULL;
}

const NetParam *network_logical_params(const Network *net, int *n) {
  *n = net->logical ? net->num_logical : net->num_tensors;
  return net->logical ? net->logical : net->params;
}

int network_has_reduce_group(const Network *net, NetReduceGroup group) {
  for (int i = 0; i < net->num_tensors; i++)
    if (net->params[i].reduce == group) return 1;
  return 0;
}

int network_reduce_ranges(const Network *net, NetReduceGroup group, size_t *begin, size_t *end, int cap) {
  int n = 0;
  for (int i = 0; i < net->num_tensors; i++) {
    const NetParam *p = &net->params[i];
    if (p->reduce != group) continue;
    if (n < cap) {
      begin[n] = p->offset;
      end[n] = p->offset + p->numel;
    }
    n++;
  }
  return n;
}

int network_group_ranges(const Network *net, int group, size_t *begin, size_t *end, int cap) {
  int n = 0;
  size_t last_end = 0;
  for (int i = 0; i < net->num_tensors; i++) {
    const NetParam *p = &net->params[i];
    if (p->param_group != group) continue;
    if (n > 0 && last_end == p->offset) {
      if (n <= cap) end[n - 1] = p->offset + p->numel;
    } else {
      if (n < cap) begin[n] = p->offset, end[n] = p->offset + p->numel;
      n++;
    }
    last_end = p->offset + p->numel;
  }
  return n;
}

double network_metric(const NetMetric *metrics, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(metrics[i].name, name)) return metrics[i].value;
  return NAN;
}

void network_free(Network *net) {
  if (net->ops && net->ops->free) net->ops->free(net);
  free(net->params);
  memset(net, 0, sizeof *net);
}

void network_cache_bf16_weights(const Network *net) {
  for (int i = 0; i < net->num_tensors; i++) {
    const NetParam *p = &net->params[i];
    if (p->no_weight_decay || p->ndim < 2) continue;
    bf16_weights_register_tensor(net->values + p->offset, p->ndim, (long)p->shape[0], (long)p->shape[1], p->numel);
  }
}

void network_forget_bf16_weights(const Network *net) {
  if (net->values) bf16_weights_forget(net->values, net->num_values);
}

void network_weights_changed(const Network *net, int group) {
  if (group < 0 || net->num_param_groups <= 1) {
    bf16_weights_invalidate(net->values, net->num_values);
    return;
  }
  for (int i = 0; i < net->num_tensors; i++)
    if (net->params[i].param_group == group)
      bf16_weights_invalidate(net->values + net->params[i].offset, net->params[i].numel);
}
