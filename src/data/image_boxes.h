/* Object boxes in dlib's image-metadata XML (the format of imglab and of
 * dlib's examples/faces/training.xml and testing.xml, which Debian's
 * libdlib19.1 installs under DLIB_FACES_DIR):
 *
 *   <image file='2008_002470.jpg' ...>
 *     <box top='181' left='274' width='52' height='53'/>   (ignore='1' optional)
 *   </image>
 *
 * Only what the image sets need is read: each image's file (relative to the
 * XML's directory unless absolute) and its boxes in pixels; a box with
 * ignore='1' is kept but marked. Errors name the XML file, the image and
 * the attribute that is missing or malformed. */
#ifndef FIVEFOLD_DATA_IMAGE_BOXES_H
#define FIVEFOLD_DATA_IMAGE_BOXES_H

#include "base/error.h"

#define DLIB_FACES_DIR "/usr/share/doc/libdlib19.1/examples/faces"

typedef struct ImageBox {
  int top, left, width, height;
  int ignore;
} ImageBox;

typedef struct ImageBoxImage {
  char path[1024]; /* resolved against the XML's directory */
  int first_box, num_boxes;
} ImageBoxImage;

typedef struct ImageBoxList {
  ImageBoxImage *images;
  int num_images;
  ImageBox *boxes;
  int num_boxes;
} ImageBoxList;

int image_boxes_read(const char *xml_path, ImageBoxList *out, Error *err);
void image_boxes_free(ImageBoxList *l);

#endif
