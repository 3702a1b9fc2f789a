"""Every kind the daemon serves, in one registry."""

from diskferry.control.resources.backup import BACKUPS
from diskferry.control.resources.backupstoragelocation import BACKUP_STORAGE_LOCATIONS
from diskferry.control.resources.core import EVENTS, NAMESPACES, SECRETS
from diskferry.control.resources.datadownload import DATA_DOWNLOADS
from diskferry.control.resources.datamoverconfig import DATA_MOVER_CONFIGS
from diskferry.control.resources.dataupload import DATA_UPLOADS
from diskferry.control.resources.kinds import Registry
from diskferry.control.resources.restore import RESTORES
from diskferry.control.resources.schedule import SCHEDULES
from diskferry.control.resources.storageclass import STORAGE_CLASSES
from diskferry.control.resources.vdexport import VIRTUAL_DATA_EXPORTS
from diskferry.control.resources.vdsnapshot import VIRTUAL_DISK_SNAPSHOTS
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS
from diskferry.control.resources.virtualimage import CLUSTER_VIRTUAL_IMAGES, VIRTUAL_IMAGES
from diskferry.control.resources.virtualmachine import VIRTUAL_MACHINES
from diskferry.control.resources.virtualmachineclass import VIRTUAL_MACHINE_CLASSES
from diskferry.control.resources.vmbackup import VIRTUAL_MACHINE_BACKUPS
from diskferry.control.resources.vmbackuptracker import VIRTUAL_MACHINE_BACKUP_TRACKERS
from diskferry.control.resources.vmexport import VIRTUAL_MACHINE_EXPORTS

REGISTRY = Registry(
    [
        NAMESPACES,
        SECRETS,
        EVENTS,
        STORAGE_CLASSES,
        VIRTUAL_DISKS,
        VIRTUAL_IMAGES,
        CLUSTER_VIRTUAL_IMAGES,
        VIRTUAL_DISK_SNAPSHOTS,
        VIRTUAL_MACHINE_EXPORTS,
        VIRTUAL_DATA_EXPORTS,
        VIRTUAL_MACHINE_CLASSES,
        VIRTUAL_MACHINES,
        DATA_MOVER_CONFIGS,
        BACKUP_STORAGE_LOCATIONS,
        DATA_UPLOADS,
        DATA_DOWNLOADS,
        BACKUPS,
        RESTORES,
        SCHEDULES,
        VIRTUAL_MACHINE_BACKUP_TRACKERS,
        VIRTUAL_MACHINE_BACKUPS,
    ]
)
