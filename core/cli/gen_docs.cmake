# Run at build time (cmake -P) after loupe is linked: write the man pages and completions from the
# option tables into DIR (`loupe --generate-docs`, core/cli/gen_docs.h), gzip the pages as
# Debian wants them (-9n: no name or time stamp, so the bytes repeat), then touch STAMP.
#   -DLOUPE=<loupe binary> -DDIR=<output folder> -DSTAMP=<file> [-DGZIP=<gzip>]
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
execute_process(COMMAND ${LOUPE} --generate-docs ${DIR} RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "loupe --generate-docs ${DIR} failed (${status})")
endif()
if(GZIP)
  file(GLOB pages ${DIR}/man1/*.1)
  execute_process(COMMAND ${GZIP} -9nf ${pages} RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "gzip of the man pages failed (${status})")
  endif()
endif()
file(TOUCH ${STAMP})
