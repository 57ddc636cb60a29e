"""Vulkan device probe: which physical devices the Vulkan loader reports, without Taichi.

``devices()`` asks the loader (libvulkan) for its physical devices and their types through ctypes.
It loads every installed Vulkan driver into the calling process, so tirender runs this module as a
script in a child process (``python -I -S vkprobe.py`` prints the JSON list; tirender/backend.py
vulkan_devices). Standard library only.
"""
import ctypes
import json
import os
import sys


class _VkApplicationInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p), ("pApplicationName", ctypes.c_char_p),
                ("applicationVersion", ctypes.c_uint32), ("pEngineName", ctypes.c_char_p),
                ("engineVersion", ctypes.c_uint32), ("apiVersion", ctypes.c_uint32)]


class _VkInstanceCreateInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("pApplicationInfo", ctypes.POINTER(_VkApplicationInfo)),
                ("enabledLayerCount", ctypes.c_uint32), ("ppEnabledLayerNames", ctypes.c_void_p),
                ("enabledExtensionCount", ctypes.c_uint32), ("ppEnabledExtensionNames", ctypes.c_void_p)]


def _devices():
    """[(name, deviceType)] of the Vulkan physical devices, via the loader (libvulkan.so.1)."""
    names = ("vulkan-1.dll",) if sys.platform == "win32" else \
        ("libvulkan.1.dylib", "libMoltenVK.dylib") if sys.platform == "darwin" else ("libvulkan.so.1",)
    lib = None
    for n in names:
        try:
            lib = ctypes.CDLL(n)
            break
        except OSError:
            continue
    if lib is None:
        return []
    handle = ctypes.c_void_p
    lib.vkCreateInstance.restype = ctypes.c_int32
    lib.vkCreateInstance.argtypes = [ctypes.POINTER(_VkInstanceCreateInfo), ctypes.c_void_p, ctypes.POINTER(handle)]
    lib.vkEnumeratePhysicalDevices.restype = ctypes.c_int32
    lib.vkEnumeratePhysicalDevices.argtypes = [handle, ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(handle)]
    lib.vkGetPhysicalDeviceProperties.restype = None
    lib.vkGetPhysicalDeviceProperties.argtypes = [handle, ctypes.c_void_p]
    lib.vkDestroyInstance.restype = None
    lib.vkDestroyInstance.argtypes = [handle, ctypes.c_void_p]
    app = _VkApplicationInfo(0, None, b"tirender-probe", 1, b"tirender", 1, 1 << 22)   # Vulkan 1.0
    info = _VkInstanceCreateInfo(1, None, 0, ctypes.pointer(app), 0, None, 0, None)
    inst = handle()
    if lib.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(inst)) != 0 or not inst.value:
        return []
    out = []
    try:
        count = ctypes.c_uint32(0)
        if lib.vkEnumeratePhysicalDevices(inst, ctypes.byref(count), None) < 0 or count.value == 0:
            return []
        devs = (handle * count.value)()
        if lib.vkEnumeratePhysicalDevices(inst, ctypes.byref(count), devs) < 0:   # VK_INCOMPLETE (5) is fine
            return []
        for i in range(count.value):
            # VkPhysicalDeviceProperties is ~824 bytes: apiVersion, driverVersion, vendorID, deviceID,
            # deviceType (uint32 each), then deviceName[256]; a generous buffer, read by offset.
            buf = ctypes.create_string_buffer(4096)
            lib.vkGetPhysicalDeviceProperties(devs[i], buf)
            dtype = int.from_bytes(buf.raw[16:20], sys.byteorder)
            name = buf.raw[20:276].split(b"\0", 1)[0].decode("utf-8", "replace")
            out.append((name, dtype))
    finally:
        lib.vkDestroyInstance(inst, None)
    return out


def devices():
    """[(device name, VkPhysicalDeviceType)]; [] when there is no loader, no device, or anything goes
    wrong (a driver's chatter on stdout/stderr is discarded)."""
    try:
        with _quiet_fds():
            return _devices()
    except Exception:  # noqa: BLE001  (any ctypes/loader trouble: no Vulkan)
        return []


class _quiet_fds:
    """File descriptors 1 and 2 sent to /dev/null (drivers print from C)."""

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = [os.dup(1), os.dup(2)]
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)

    def __exit__(self, *exc):
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for f in self.saved:
            os.close(f)
        return False


if __name__ == "__main__":
    print(json.dumps(devices()))
