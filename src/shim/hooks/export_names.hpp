// Never compiled: make_exports_map.cmake runs the preprocessor over this file to get
// one "gpumem_export_name <entry point>" marker per hook of hook_table.hpp, so the
// version script always lists exactly the hooks the table has.

#include "hooks/hook_table.hpp"

#define GPUMEM_EXPORT_NAME(n) gpumem_export_name n
GPUMEM_ALL_HOOKS(GPUMEM_EXPORT_NAME)
