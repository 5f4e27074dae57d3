# Included by engine/CMakeLists.txt (every backend folder's backend.cmake): adds this folder to hl_engine.
# The Vulkan compute backend (issue 7): only with HL_ENABLE_VULKAN, the Vulkan SDK/loader and glslc.
# Each shaders/*.comp becomes SPIR-V as a C initializer list (glslc -mfmt=c) that
# vk_kernels.cpp includes, so the executable carries its kernels.
if(HL_ENABLE_VULKAN)
  find_package(Vulkan QUIET)
  find_program(HL_GLSLC glslc HINTS ENV VULKAN_SDK PATH_SUFFIXES bin)
  if(Vulkan_FOUND AND HL_GLSLC)
    set(HL_SPV_DIR ${CMAKE_CURRENT_BINARY_DIR}/spv)
    file(MAKE_DIRECTORY ${HL_SPV_DIR})
    file(GLOB HL_VK_SHADERS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/shaders/*.comp)
    set(HL_VK_SPV)
    foreach(src ${HL_VK_SHADERS})
      get_filename_component(leaf ${src} NAME)
      set(out ${HL_SPV_DIR}/${leaf}.inc)
      add_custom_command(OUTPUT ${out}
        COMMAND ${HL_GLSLC} --target-env=vulkan1.1 -O -I ${PROJECT_SOURCE_DIR}/shaders -mfmt=c
                -MD -MF ${out}.d -o ${out} ${src}
        DEPENDS ${src} ${PROJECT_SOURCE_DIR}/shaders/common.glsl
        DEPFILE ${out}.d
        COMMENT "glslc ${leaf}" VERBATIM)
      list(APPEND HL_VK_SPV ${out})
    endforeach()
    file(GLOB HL_VK_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cpp)
    target_sources(hl_engine_lib PRIVATE ${HL_VK_SOURCES} ${HL_VK_SPV})
    # Vulkan structs are set up as `VkXxx info{VK_STRUCTURE_TYPE_...};` (the rest zero): not a bug.
    set_source_files_properties(${HL_VK_SOURCES} PROPERTIES COMPILE_OPTIONS -Wno-missing-field-initializers)
    set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/vk_kernels.cpp
                                PROPERTIES OBJECT_DEPENDS "${HL_VK_SPV}")
    target_include_directories(hl_engine_lib PRIVATE ${HL_SPV_DIR})
    target_link_libraries(hl_engine_lib PUBLIC Vulkan::Vulkan)
    target_compile_definitions(hl_engine_lib PUBLIC HL_HAVE_VULKAN=1)
    set(HL_HAVE_VULKAN ON CACHE INTERNAL "the Vulkan backend is built")
    message(STATUS "Vulkan backend: on (glslc: ${HL_GLSLC})")
  else()
    set(HL_HAVE_VULKAN OFF CACHE INTERNAL "the Vulkan backend is built")
    message(STATUS "Vulkan backend: off (Vulkan found: ${Vulkan_FOUND}, glslc: ${HL_GLSLC})")
  endif()
else()
  set(HL_HAVE_VULKAN OFF CACHE INTERNAL "the Vulkan backend is built")
endif()
