"""The FUSE mount: every branch, commit and tag of a repository as a directory.

Only this package imports pyfuse3. Layout (see DESIGN.md, Mount):

    <mountpoint>/branches/<branch>/...   read-write, staging over head
    <mountpoint>/commits/<id>/...        read-only, any unique id prefix resolves
    <mountpoint>/tags/<tag>/...          read-only

Modules: ``errnos`` (exceptions -> errno), ``inodes`` (inode table),
``trees`` (what a directory tree is and how to read it), ``reader`` (ranged,
read-ahead reads of data objects), ``openfiles`` (local write-back files),
``operations`` (the request handlers), ``watcher`` (head polling and kernel
cache invalidation), ``options`` and ``launch`` (mount/umount, daemon),
``fstab`` (the mount.gravfs helper).
"""
