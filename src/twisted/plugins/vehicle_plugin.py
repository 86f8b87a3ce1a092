from twisted.application.service import ServiceMaker


vehicle = ServiceMaker(
    "vehicle",
    "vehicle._tap",
    "Host pi agent conversations for a Garden workspace (sophia.vehicle-ride.v2).",
    "vehicle",
)
