/* dlib image-metadata XML reader (data/image_boxes.h). Not a general XML
 * parser: it finds the <image> and <box> start tags and reads their
 * attributes, which is all the format carries that an image set needs. */
#include "data/image_boxes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file_text.h"

/* Value of attribute `name` within the tag text [tag, end): 1 found, 0 not. */
static int tag_attr(const char *tag, const char *end, const char *name, char *value, size_t cap) {
  const size_t n = strlen(name);
  for (const char *p = tag; p + n + 2 < end; p++) {
    if ((p[-1] != ' ' && p[-1] != '\t' && p[-1] != '\n' && p[-1] != '\r') || strncmp(p, name, n) || p[n] != '=')
      continue;
    const char q = p[n + 1];
    if (q != '\'' && q != '"') return 0;
    const char *v = p + n + 2, *close = memchr(v, q, (size_t)(end - v));
    if (!close || (size_t)(close - v) >= cap) return 0;
    memcpy(value, v, (size_t)(close - v));
    value[close - v] = '\0';
    return 1;
  }
  return 0;
}

static int int_attr(const char *xml, const char *image, const char *tag, const char *end, const char *name, int lo,
                    int *out, Error *err) {
  char v[32], *stop;
  if (!tag_attr(tag, end, name, v, sizeof v))
    return error_set(err, ERR_FORMAT, "%s: image '%s': a <box> lacks its %s='N' attribute", xml, image, name);
  long x = strtol(v, &stop, 10);
  if (stop == v || *stop || x < lo || x > 1000000)
    return error_set(err, ERR_FORMAT, "%s: image '%s': box %s='%s', expected an integer >= %d", xml, image, name, v,
                     lo);
  *out = (int)x;
  return 0;
}

static int grow(void **array, int count, int *cap, size_t size) {
  if (count < *cap) return 0;
  int n = *cap ? 2 * *cap : 32;
  void *a = realloc(*array, (size_t)n * size);
  if (!a) return -1;
  *array = a, *cap = n;
  return 0;
}

int image_boxes_read(const char *xml_path, ImageBoxList *out, Error *err) {
  memset(out, 0, sizeof *out);
  char *text;
  int rc = file_read_text(xml_path, "box file", 1 << 26, &text, NULL, err);
  if (rc) return rc;
  const char *slash = strrchr(xml_path, '/');
  const int dir_len = slash ? (int)(slash - xml_path) : 0;
  int image_cap = 0, box_cap = 0;
  const char *p = text;
  while (!rc && (p = strstr(p, "<image"))) {
    const char *tag = p + 6, *end = strchr(tag, '>');
    if (!end) {
      rc = error_set(err, ERR_FORMAT, "%s: an <image> tag is not closed", xml_path);
      break;
    }
    if (*tag != ' ' && *tag != '\t' && *tag != '\n' && *tag != '>') { /* <images> */
      p = end;
      continue;
    }
    char file[512];
    if (!tag_attr(tag, end, "file", file, sizeof file)) {
      rc = error_set(err, ERR_FORMAT, "%s: an <image> lacks its file='...' attribute", xml_path);
      break;
    }
    if (grow((void **)&out->images, out->num_images, &image_cap, sizeof *out->images)) {
      rc = error_set(err, ERR_NOMEM, "%s: out of memory", xml_path);
      break;
    }
    ImageBoxImage *im = &out->images[out->num_images++];
    int len = file[0] == '/' || !slash ? snprintf(im->path, sizeof im->path, "%s", file)
                                       : snprintf(im->path, sizeof im->path, "%.*s/%s", dir_len, xml_path, file);
    if (len < 0 || (size_t)len >= sizeof im->path) {
      rc = error_set(err, ERR_FORMAT, "%s: image '%s': the path is too long", xml_path, file);
      break;
    }
    im->first_box = out->num_boxes, im->num_boxes = 0;
    const int self_closing = end[-1] == '/';
    const char *close = self_closing ? end : strstr(end, "</image>");
    if (!close) {
      rc = error_set(err, ERR_FORMAT, "%s: image '%s' has no </image>", xml_path, file);
      break;
    }
    for (const char *b = end; !rc && (b = strstr(b, "<box")) && b < close;) {
      const char *btag = b + 4, *bend = strchr(btag, '>');
      if (!bend || bend > close) {
        rc = error_set(err, ERR_FORMAT, "%s: image '%s': a <box> tag is not closed", xml_path, file);
        break;
      }
      if (grow((void **)&out->boxes, out->num_boxes, &box_cap, sizeof *out->boxes)) {
        rc = error_set(err, ERR_NOMEM, "%s: out of memory", xml_path);
        break;
      }
      ImageBox *box = &out->boxes[out->num_boxes];
      memset(box, 0, sizeof *box);
      char ignore[8];
      if (!(rc = int_attr(xml_path, file, btag, bend, "top", -1000000, &box->top, err)) &&
          !(rc = int_attr(xml_path, file, btag, bend, "left", -1000000, &box->left, err)) &&
          !(rc = int_attr(xml_path, file, btag, bend, "width", 1, &box->width, err)) &&
          !(rc = int_attr(xml_path, file, btag, bend, "height", 1, &box->height, err))) {
        box->ignore = tag_attr(btag, bend, "ignore", ignore, sizeof ignore) && !strcmp(ignore, "1");
        out->num_boxes++, im->num_boxes++;
      }
      b = bend;
    }
    p = close;
  }
  free(text);
  if (!rc && out->num_images == 0) rc = error_set(err, ERR_FORMAT, "%s: no <image file='...'> entries", xml_path);
  if (rc) image_boxes_free(out);
  return rc;
}

void image_boxes_free(ImageBoxList *l) {
  if (!l) return;
  free(l->images);
  free(l->boxes);
  memset(l, 0, sizeof *l);
}
