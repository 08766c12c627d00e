"""What the array containers share (zarr and HDF5: a group per split, an array per
field): chunk sizing and chunk-aligned writes (:mod:`.chunked`)."""
