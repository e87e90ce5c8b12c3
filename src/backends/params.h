/* Backend parameters (cube_server_options_t.backend_params): the checks of
 * the header every parameter struct begins with (cube/options.h), shared by
 * the backends' device_create. The structs and their _initialize functions
 * are public (cube/backends/<name>.h); params.c holds the initializers, so
 * they exist whether or not a backend is built. */
#ifndef CUBE_BACKENDS_PARAMS_H_
#define CUBE_BACKENDS_PARAMS_H_

#include <stddef.h>

#include "cube/client.h"
#include "cube/options.h"

/* Copies the parameters |options| gives for a device of |backend| over
 * |out|, which holds the defaults (|size| bytes, the current struct; older
 * callers may pass any struct_size from |min_size|, the first version's, and
 * the fields past it keep their defaults). No options or no parameters:
 * |out| is left as it is. INVALID_ARGUMENT, naming |what| (the device), when
 * the parameters are for another backend or their struct_size is not one of
 * |backend|'s. */
cube_status_t cube__backend_params_take(const cube_server_options_t* options,
                                        cube_backend_t backend, const char* what,
                                        size_t min_size, size_t size, void* out);

/* The client-side check of cube_client_init: the header names the device's
 * backend and a plausible size (the backend checks the rest). */
cube_status_t cube__backend_params_check_header(const void* params, cube_device_id_t device);

#endif /* CUBE_BACKENDS_PARAMS_H_ */
