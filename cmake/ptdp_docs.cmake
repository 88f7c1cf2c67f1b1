# Writes the man page and the bash and zsh completions from the built binary (cli/docs.h):
#   cmake -DPTDP=path/to/ptdp -DOUT=build/share -P ptdp_docs.cmake
foreach(doc "man/man1/ptdp.1;--man" "bash-completion/completions/ptdp;--completion;bash"
            "zsh/site-functions/_ptdp;--completion;zsh")
  list(POP_FRONT doc path)
  get_filename_component(dir ${OUT}/${path} DIRECTORY)
  file(MAKE_DIRECTORY ${dir})
  execute_process(COMMAND ${PTDP} ${doc} OUTPUT_FILE ${OUT}/${path}.tmp RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${PTDP} ${doc} failed (${rc})")
  endif()
  file(RENAME ${OUT}/${path}.tmp ${OUT}/${path})
endforeach()
