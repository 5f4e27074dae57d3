# Included by engine/CMakeLists.txt (every backend folder's backend.cmake): adds this folder to hl_engine.
# The CUDA backend (issue 8): whenever the top level found a CUDA toolkit (nvcc and the CUDA
# libraries). Kernels in backend/cuda/*.cu (nvcc), the host side in backend/cuda/*.cpp (the C++
# compiler, with the CUDA headers); the runtime is linked statically, cuBLAS is loaded (dlopen) by
# the first CUDA backend, so programs that never use it do not pay for mapping it at start-up.
# Whether a device exists is decided at run time (cuda_available()).
if(HL_ENABLE_CUDA AND CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND TARGET CUDA::cublas)
  file(GLOB HL_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cpp
       ${CMAKE_CURRENT_LIST_DIR}/*.cu)
  target_sources(hl_engine_lib PRIVATE ${HL_CUDA_SOURCES})
  target_compile_options(hl_engine_lib PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
  target_link_libraries(hl_engine_lib PUBLIC CUDA::cudart_static ${CMAKE_DL_LIBS})
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cpp PROPERTIES
                              COMPILE_DEFINITIONS HL_CUBLAS_DIR="${CUDAToolkit_LIBRARY_DIR}")
  target_compile_definitions(hl_engine_lib PUBLIC HL_HAVE_CUDA=1)
  set(HL_HAVE_CUDA ON CACHE INTERNAL "the CUDA backend is built")
  message(STATUS "CUDA backend: on (${CMAKE_CUDA_COMPILER}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  set(HL_HAVE_CUDA OFF CACHE INTERNAL "the CUDA backend is built")
  if(HL_ENABLE_CUDA)
    message(STATUS "CUDA backend: off (no CUDA toolkit found)")
  endif()
endif()
