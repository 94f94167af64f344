#include <gpumem/forwarding_resource_adaptor.hpp>

#include <string>

namespace gpumem {

forwarding_resource_adaptor::forwarding_resource_adaptor(device_memory_resource* upstream, char const* adaptor)
    : upstream_{upstream} {
  if (upstream == nullptr) throw logic_error{std::string{"gpumem: "} + adaptor + " needs an upstream resource"};
}

}  // namespace gpumem
