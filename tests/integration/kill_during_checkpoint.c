/* Fault injection for checkpoint_crash.sh, kept out of the library: loaded
 * with LD_PRELOAD into gpipe-train, it wraps HDF5's H5Dwrite and, after the
 * first dataset written into a checkpoint's partial file (*.h5.tmp), flushes
 * that file and kills the process with SIGKILL: a crash in the middle of a
 * checkpoint write. Other files (data, traces) are written normally. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <hdf5.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

typedef herr_t (*h5dwrite_fn)(hid_t, hid_t, hid_t, hid_t, hid_t, const void*);

herr_t H5Dwrite(hid_t dset_id, hid_t mem_type_id, hid_t mem_space_id, hid_t file_space_id,
                hid_t plist_id, const void* buf) {
  static h5dwrite_fn real = NULL;
  if (!real) real = (h5dwrite_fn)dlsym(RTLD_NEXT, "H5Dwrite");
  const herr_t status = real(dset_id, mem_type_id, mem_space_id, file_space_id, plist_id, buf);
  char name[4096] = "";
  const hid_t file = H5Iget_file_id(dset_id);
  if (file >= 0) {
    const ssize_t n = H5Fget_name(file, name, sizeof name);
    const size_t len = n > 0 ? strlen(name) : 0;
    if (status >= 0 && len > 7 && strcmp(name + len - 7, ".h5.tmp") == 0) {
      H5Fflush(file, H5F_SCOPE_GLOBAL);
      kill(getpid(), SIGKILL);
    }
    H5Fclose(file);
  }
  return status;
}
