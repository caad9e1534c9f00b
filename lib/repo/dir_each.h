/* lib/repo/dir_each.h - one walk of a folder's tree through descriptors, never following a link
 * (the pull's sweep empties a killed pull's temp with it, the collection finds killed writers'
 * temps with it). */
#ifndef KESTREL_DIR_EACH_H
#define KESTREL_DIR_EACH_H

#include <sys/stat.h>

/* One entry: at, the folder holding it (open); st, its lstat; walked, 1 for a folder whose entries
 * were visited just before (0: a folder not walked into, or not a folder). */
typedef void (*kestrel__dir_visit)(int at, const char *name, const struct stat *st, int walked, void *ctx);

/* Visit each entry of the folder open as dfd (closed here; "." and ".." left out), and of its folders
 * down to depth levels (0: its own entries only), each folder's entries before the folder itself. A
 * folder is walked into only when opened without following a link and still the one examined. */
void kestrel__dir_each(int dfd, int depth, kestrel__dir_visit visit, void *ctx);

#endif
