# The Python wheel (pyproject.toml, built by scikit-build-core with CKPT_PYTHON_WHEEL=ON): libckpt, its programs and
# the JAX FFI handlers go inside the package, in ckpt/_lib/, where ckpt/_native.py looks first, libckpt finds its
# worker and agent beside itself (io/helper_executable.cc) and the console scripts `ckpt` and `ckpt-launch` find
# their programs (ckpt/_programs.py). Only the component python_wheel is installed into the wheel
# (pyproject.toml's install.components); auditwheel then bundles the libraries they link that a bare system lacks
# (tools/package.sh).
set(CKPT_WHEEL_LIB_DIR ckpt/_lib)

# A wheel holds no symbolic links: libckpt is the one file libckpt.so.0 (its soname), with no versioned name.
set_property(TARGET ckpt PROPERTY VERSION)
install(TARGETS ckpt LIBRARY DESTINATION ${CKPT_WHEEL_LIB_DIR} COMPONENT python_wheel NAMELINK_SKIP)
install(TARGETS ckpt-io-worker ckpt-agent ckpt-launch ckpt_cli RUNTIME DESTINATION ${CKPT_WHEEL_LIB_DIR}
        COMPONENT python_wheel)
set_target_properties(ckpt_cli PROPERTIES INSTALL_RPATH "$ORIGIN")
foreach(handlers ckpt_jax ckpt_jax_cuda)
  if(TARGET ${handlers})
    set_target_properties(${handlers} PROPERTIES INSTALL_RPATH "$ORIGIN")
    install(TARGETS ${handlers} LIBRARY DESTINATION ${CKPT_WHEEL_LIB_DIR} COMPONENT python_wheel)
  endif()
endforeach()
