/* face_detect: BlazeFace through the C API, on a raw RGB picture, frame after frame.
 *
 *   face_detect MODEL PICTURE.rgb [FRAMES [ANCHORS.bin]]
 *
 * PICTURE.rgb holds the picture's bytes (R G B, rows top to bottom) already at the model's
 * input size (npu_runtime_get_input_size). The picture is detected FRAMES times (default
 * 1); every frame must find the same faces as the first. Prints the faces of the first
 * frame in pixels, then "frames N faces K ok". Written only against npu.h.
 * Build: cc face_detect.c $(npu capi --cflags) $(npu capi --libs) -o face_detect
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npu.h"

#define MAX_FACES 16

static int failed(const char *call, npu_status_t status)
{
    fprintf(stderr, "%s: status %d: %s\n", call, (int)status, npu_runtime_last_error());
    return 1;
}

static unsigned char *read_file(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    unsigned char *data = NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (*size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        data = malloc(*size ? (size_t)*size : 1);
        if (data != NULL && fread(data, 1, (size_t)*size, f) != (size_t)*size) {
            free(data);
            data = NULL;
        }
    }
    fclose(f);
    return data;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: %s MODEL PICTURE.rgb [FRAMES [ANCHORS.bin]]\n", argv[0]);
        return 2;
    }
    long frames = argc > 3 ? strtol(argv[3], NULL, 10) : 1;
    const char *anchors = argc > 4 ? argv[4] : NULL;
    long size = 0;
    unsigned char *picture = read_file(argv[2], &size);
    if (picture == NULL || frames < 1) {
        fprintf(stderr, "%s: cannot read the picture (or FRAMES < 1)\n", argv[2]);
        return 2;
    }

    npu_handle_t detector = NULL;
    npu_status_t status = npu_runtime_init_face_ssd(argv[1], anchors, &detector);
    if (status != NPU_STATUS_OK) {
        free(picture);
        return failed("npu_runtime_init_face_ssd", status);
    }
    uint32_t w = 0, h = 0, c = 0;
    status = npu_runtime_get_input_size(detector, &w, &h, &c);
    if (status != NPU_STATUS_OK)
        return failed("npu_runtime_get_input_size", status);
    printf("input %ux%ux%u\n", w, h, c);

    npu_detection_t first[MAX_FACES], faces[MAX_FACES];
    uint32_t first_count = 0, count = 0;
    int rc = 0;
    for (long frame = 0; frame < frames && rc == 0; frame++) {
        status = npu_runtime_infer_image(detector, picture, (uint32_t)size, frame ? faces : first, MAX_FACES,
                                         frame ? &count : &first_count);
        if (status != NPU_STATUS_OK) {
            fprintf(stderr, "frame %ld: ", frame);
            rc = failed("npu_runtime_infer_image", status);
        } else if (frame && (count != first_count || memcmp(faces, first, count * sizeof faces[0]) != 0)) {
            fprintf(stderr, "frame %ld: %u faces, different from the first frame's %u\n", frame, count, first_count);
            rc = 1;
        }
    }
    if (rc == 0) {
        for (uint32_t i = 0; i < first_count; i++)
            printf("face score %.3f box x %.1f..%.1f y %.1f..%.1f\n", first[i].score, first[i].x_min * w,
                   first[i].x_max * w, first[i].y_min * h, first[i].y_max * h);
        printf("frames %ld faces %u ok\n", frames, first_count);
    }
    npu_runtime_free(detector);
    free(picture);
    return rc;
}
