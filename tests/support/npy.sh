# Shell helper for tests that write .npy files byte by byte (no numpy needed).
# npy_header DESCR SHAPE: an NPY 1.0 header on stdout for dtype DESCR ('|b1', '<f4', ...) and
# SHAPE as Python writes it inside the parentheses ('4, 4', '16,'), padded with spaces so that
# the data starts on a 64-byte boundary, as numpy pads it. The data bytes follow it.
npy_header() {
  local dict="{'descr': '$1', 'fortran_order': False, 'shape': ($2), }"
  local total=$((10 + ${#dict} + 1)) pad hlen
  pad=$(( (64 - total % 64) % 64 ))
  hlen=$(( ${#dict} + pad + 1 ))
  printf '\x93NUMPY\x01\x00'
  printf "\\x$(printf %02x $((hlen & 255)))\\x$(printf %02x $((hlen >> 8)))"
  printf '%s' "$dict"
  printf '%*s' "$pad" ''
  printf '\n'
}
